"""Flows name a tool; the schema knows what each tool carries and preflight what it needs."""
from __future__ import annotations

from pathlib import Path

import pytest

from longhaul.appliance.config.load import load_config
from longhaul.appliance.config.schema import Flow
from longhaul.appliance.run.preflight import check_tools
from longhaul.core.errors import ConfigError
from longhaul.drivers.registry import tool_for


def _config(tmp: Path, flow: str) -> Path:
    (tmp / "profiles").mkdir()
    (tmp / "profiles" / "p.toml").write_text(f"""
[profile]
description = "x"
[topology]
pairs = 1
bottleneck_rate_mbps = 100
rtt_ms = 10
[[flows]]
name = "f"
role = "foreground"
{flow}
duration_s = 5
""")
    (tmp / "config.toml").write_text('[run]\nprofiles = ["p"]\n')
    return tmp / "config.toml"


def test_tool_implies_its_transport():
    assert Flow(name="u", role="background", tool="udt", duration_s=1).protocol == "udp"
    assert Flow(name="g", role="background", tool="gridftp", streams=16, duration_s=1).protocol == "tcp"
    sin = Flow(name="s", role="background", tool="paced-udp", pattern="sinusoid", min_mbps=1, max_mbps=10,
               period_s=10, duration_s=20)
    assert sin.protocol == "udp" and sin.udp_rate_mbps is None


def test_iperf3_driver_builds_what_the_trial_needs():
    tool = tool_for("iperf3")
    assert tool.shared_servers and tool.sets_cca and tool.executables == ("iperf3",)


def test_unknown_tool_is_refused_at_the_tool_key(tmp_path):
    """The registry is the schema's list of tools: a name with no driver stops the load."""
    with pytest.raises(ConfigError) as err:
        load_config(_config(tmp_path, 'tool = "ftp"'))
    text = str(err.value)
    assert "p.toml:11" in text and "flows[0].tool = 'ftp'" in text and "one of iperf3, gridftp" in text


def test_trex_is_refused_at_its_line_where_the_lab_has_no_generator(tmp_path):
    config = load_config(_config(tmp_path, 'tool = "trex"\nudp_rate_mbps = 10'))
    for here in (True, False):           # the embedded lab, and real hosts without a generator
        with pytest.raises(ConfigError) as err:
            check_tools(config, here=here)
        # what would give the config's backend (the embedded lab) a generator
        assert "p.toml:11" in str(err.value) and "[lab.trex] path = a TRex release tree" in str(err.value)


def test_trex_is_not_refused_where_the_lab_has_a_generator(tmp_path):
    # TRex was refused on every backend, so real hosts never got to run it (issue 15)
    check_tools(load_config(_config(tmp_path, 'tool = "trex"\nudp_rate_mbps = 10')), here=False, generator=True)


def test_missing_program_is_refused(tmp_path, monkeypatch):
    config = load_config(_config(tmp_path, 'tool = "iperf3"'))
    monkeypatch.setattr("longhaul.appliance.run.preflight.shutil.which", lambda exe: None)
    with pytest.raises(ConfigError) as err:
        check_tools(config)
    assert "needs iperf3 installed" in str(err.value)


def test_flow_options_reach_the_driver(tmp_path):
    from longhaul.appliance.config.schema import Cell
    from longhaul.appliance.run.trial.plan import FlowRun, burst_spec
    from longhaul.drivers import udt
    from longhaul.drivers.patterns import bursts

    flow = Flow(name="u", role="foreground", tool="udt", duration_s=5, options={"udt_rcvbuf": 20_000_000})
    cell = Cell(flows=[flow])
    run = FlowRun(flow, cell.flow_cca(flow), 5201, tool_for("udt"))
    spec = burst_spec(run, bursts(flow)[0], cell, tmp_path, {})
    assert spec.options["udt_rcvbuf"] == 20_000_000
    argv = tool_for("udt").server(spec).argv
    assert argv[argv.index("--udt-rcvbuf") + 1] == "20000000"
    assert udt.OPTION_FLAGS["udt_rcvbuf"] == "--udt-rcvbuf"
