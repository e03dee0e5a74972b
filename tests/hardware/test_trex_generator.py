"""A TRex generator in the embedded lab (hardware/generator.py): `[lab.trex] path` gives the
netns lab a namespace G1 beside the senders, whose veth into R1 TRex drives through DPDK's
af_packet driver from a generated trex_cfg.yaml.

TRex's release tree cannot be installed here: its configuration, the topology and the refusals are
tested here, and a real lab proves G1's packets take the shaped path; the live run needs
LONGHAUL_TREX_PATH (a release tree) and skips with that reason where there is none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from lab_support import lab_skip_reason, our_namespaces, write_lab_config
from trex_support import TREX_PATH, fake_tree, live_profile, needs_tree

from longhaul.appliance.config.load import load_config
from longhaul.core.errors import ConfigError
from longhaul.hardware.backends.base import LinkSettings
from longhaul.hardware.backends.netns.backend import NetnsBackend, NetnsSettings, preflight
from longhaul.hardware.backends.netns.features import Features
from longhaul.hardware.backends.netns.lab import NetnsLab, lab_plan
from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import ProcessTable
from longhaul.hardware.generator import CONFIG_FILE, TrexPort, TrexSection, platform_config, rpc_listening, tree_problem
from longhaul.hardware.path_rtt import measure_idle
from longhaul.hardware.topology import GENERATOR, dumbbell


def test_the_platform_config_drives_the_generator_veth_by_af_packet_beside_a_dummy_port():
    cfg = yaml.safe_load(platform_config([TrexPort("eth0", "10.3.0.2", "10.3.0.1")]))   # what TRex reads it with
    assert cfg == [{"version": 2, "port_limit": 2,
                    "interfaces": ["--vdev=net_af_packet0,iface=eth0", "dummy"],
                    "port_info": [{"ip": "10.3.0.2", "default_gw": "10.3.0.1"},
                                  {"ip": "0.0.0.0", "default_gw": "0.0.0.0"}]}]
    two = yaml.safe_load(platform_config([TrexPort("p0", "10.3.0.2", "10.3.0.1"), TrexPort("p1", "10.4.0.2", "10.4.0.1")]))
    assert two[0]["interfaces"] == ["--vdev=net_af_packet0,iface=p0", "--vdev=net_af_packet1,iface=p1"]
    with pytest.raises(ValueError):
        platform_config([])


def test_the_generator_sits_beside_the_senders_and_the_receivers_route_back_to_it():
    topo = dumbbell("t", 2, 100, 20, generator=True)
    assert topo.host(GENERATOR).role == "generator" and topo.address(GENERATOR) == "10.3.0.2"
    link = topo.access_link(GENERATOR)
    assert (link.b.host, link.b.ifname, link.rate_mbps) == ("R1", "g1", 100)
    steps = [(s.host, s.argv) for s in lab_plan(topo, LinkSettings(40, 100_000, "cubic", "large"), preflight_features())]
    assert (GENERATOR, ["ip", "route", "add", "default", "via", "10.3.0.1"]) in steps
    assert ("R2", ["ip", "route", "add", "10.3.0.0/16", "via", "10.0.0.1"]) in steps
    assert GENERATOR not in {h.name for h in dumbbell("t", 2, 100, 20).hosts}


def preflight_features() -> Features:
    return Features(root=True, netem=True, tbf=True, htb=True, nfqueue=True, congestion_controls=("cubic",),
                    allowed_congestion_controls=("cubic",))


def test_trex_sends_from_g1_to_the_pairs_receiver_at_the_access_rate(tmp_path):
    lab = NetnsLab(dumbbell("t", 2, 100, 20, generator=True), LinkSettings(40, 100_000, "cubic", "large"),
                   preflight_features(), ProcessTable(), CleanupStack(), tmp_path, trex=TrexSection(path="/opt/trex"))
    assert lab.generator_facts(2) == {"trex_path": "/opt/trex", "trex_ports": [0], "src_ip": "10.3.0.2",
                                      "line_rate_mbps": 100, "dst_ip": "10.2.2.2", "rx_iface": "eth0"}


def test_a_tree_is_checked_when_the_config_loads(tmp_path):
    assert "t-rex-64" in tree_problem(tmp_path)
    tree = fake_tree(tmp_path / "trex")
    assert tree_problem(tree) is None
    configured = NetnsBackend().configure(NetnsSettings.model_validate({"trex": {"path": "trex"}}), tmp_path)
    assert configured.trex.path == str(tree) and NetnsBackend().has_generator(configured)
    assert not NetnsBackend().has_generator(NetnsBackend().configure(NetnsSettings(), tmp_path))


def test_a_missing_tree_is_refused_at_its_line_with_nothing_set_up(tmp_path):
    profile = (Path(__file__).parents[2] / "profiles" / "quickstart.toml").read_text()
    config = write_lab_config(tmp_path, profile, "quickstart")
    config.write_text(config.read_text() + '[lab]\nbackend = "netns"\n[lab.trex]\npath = "/nowhere/trex"\n')
    with pytest.raises(ConfigError) as err:
        load_config(config)
    text = str(err.value)
    assert "trex.path" in text and "/nowhere/trex" in text and "t-rex-64" in text, text
    line = config.read_text().splitlines().index('path = "/nowhere/trex"') + 1
    assert f"config.toml:{line}" in text, text


@pytest.mark.lab
@pytest.mark.timeout(120)
def test_the_generator_namespace_reaches_every_receiver_through_the_shaped_bottleneck(tmp_path):
    """Without TRex the lab is the same: G1's echoes to D1 and D2 take the configured RTT (they
    cross the delay), and its packets are counted by R1's bottleneck shaper."""
    if lab_skip_reason():
        pytest.skip(lab_skip_reason())
    before = our_namespaces()
    topo = dumbbell(f"g{os.getpid() % 10000}", 2, 100, 20, generator=True)
    with CleanupStack() as cleanup:
        lab = NetnsLab(topo, LinkSettings(30, 100_000, "cubic", "large"), preflight(), ProcessTable(), cleanup, tmp_path)
        lab.build()
        r1 = lab.executor("R1")
        sent_before = _qdisc_bytes(r1)
        for pair in (1, 2):
            rtt = measure_idle(lab.executor(GENERATOR), lab.address(f"D{pair}"))
            assert rtt is not None and 29.5 <= rtt.median_ms <= 36, (pair, rtt)
        assert _qdisc_bytes(r1) > sent_before
    assert set(our_namespaces()) <= set(before)


# What longhaul does with a tree's t-rex-64 (start it in G1 from the tree, with the generated
# configuration; wait for its RPC port; stop it with the lab), shown with stand-ins that record
# their argv: TRex's own behaviour is the live test's.
LISTENS = """#!/bin/sh
echo "$PWD $*" > "{out}"
exec python3 -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 4501)); s.listen()
time.sleep(600)'
"""
FAILS = """#!/bin/sh
echo "EAL: Error - exiting with code: 1: no huge pages" >&2
exit 1
"""


@pytest.mark.lab
@pytest.mark.timeout(120)
def test_the_lab_starts_trex_in_g1_from_its_tree_and_stops_it_with_the_lab(tmp_path):
    if lab_skip_reason():
        pytest.skip(lab_skip_reason())
    tree, seen = fake_tree(tmp_path / "trex"), tmp_path / "argv"
    (tree / "t-rex-64").write_text(LISTENS.format(out=seen))
    section = TrexSection(path=str(tree))
    topo = dumbbell(f"t{os.getpid() % 10000}", 1, 100, 20, generator=True)
    with CleanupStack() as cleanup:
        lab = NetnsLab(topo, LinkSettings(10, 50_000, "cubic", "large"), preflight(), ProcessTable(), cleanup,
                       tmp_path, trex=section)
        lab.build()
        cwd, *argv = seen.read_text().split()
        assert cwd == str(tree) and argv[argv.index("--cfg") + 1] == str(tmp_path / CONFIG_FILE)
        assert "iface=eth0" in (tmp_path / CONFIG_FILE).read_text()
        assert rpc_listening(lab.executor(GENERATOR)) and not rpc_listening(lab.executor("S1"))   # G1's own
        running = lab.procs.pids()
    assert running and not [pid for pid in running if Path(f"/proc/{pid}").exists()]


@pytest.mark.lab
@pytest.mark.timeout(120)
def test_a_trex_that_exits_fails_the_build_with_its_words_and_leaves_nothing(tmp_path):
    if lab_skip_reason():
        pytest.skip(lab_skip_reason())
    before = our_namespaces()
    tree = fake_tree(tmp_path / "trex")
    (tree / "t-rex-64").write_text(FAILS)
    topo = dumbbell(f"f{os.getpid() % 10000}", 1, 100, 20, generator=True)
    with pytest.raises(RuntimeError, match="exited .* before listening: .*no huge pages"):
        with CleanupStack() as cleanup:
            NetnsLab(topo, LinkSettings(10, 50_000, "cubic", "large"), preflight(), ProcessTable(), cleanup,
                     tmp_path, trex=TrexSection(path=str(tree))).build()
    assert set(our_namespaces()) <= set(before)


def _qdisc_bytes(router) -> int:
    out = router.run(["tc", "-s", "qdisc", "show", "dev", "wan"]).stdout
    return max(int(tok) for line in out.splitlines() if line.strip().startswith("Sent")
               for tok in [line.split()[1]])


LIVE_PROFILE = live_profile("embedded lab", access_mbps=100, bottleneck_mbps=20, queue="50KB", udp_mbps=5,
                            duration_s=8)


@pytest.mark.lab
@pytest.mark.hardware
@needs_tree
@pytest.mark.timeout(600)
def test_live_trex_flow_in_the_embedded_lab(tmp_path):
    config = write_lab_config(tmp_path, LIVE_PROFILE, "trex-live")
    config.write_text(config.read_text() + f'[lab]\nbackend = "netns"\n[lab.trex]\npath = "{TREX_PATH}"\n')
    done = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                          capture_output=True, text=True, timeout=580, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bg" in done.stderr and "trex" in done.stderr
