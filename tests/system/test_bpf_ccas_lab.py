"""longhaul's BPF congestion controls on the embedded lab: registered for a run, chosen by the flows'
sockets in the lab's namespaces, carrying traffic under the shaper as their algorithms say, and
unregistered after the run, after a SIGKILL plus `longhaul clean`, and refused at preflight where
none is built."""

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_support import PATIENT_VERIFY, our_bpf_ccas, requires_lab, write_lab_config

from longhaul.hardware import bpf_ccas

pytestmark = [pytest.mark.lab, requires_lab,
              pytest.mark.skipif(bpf_ccas.unavailable_reason() is not None,
                                 reason=f"no BPF congestion control here: {bpf_ccas.unavailable_reason()}"),
              pytest.mark.skipif(not all(c.object.is_file() for c in bpf_ccas.BPF_CCAS.values()),
                                 reason=f"the BPF objects are not built in {bpf_ccas.BUILD_BPF} (make setup builds them)")]

FLOWS = {"reno": "reno", "frac": "lh_frac10", "scal": "lh_scalable", "htcp": "lh_htcp"}
# four pairs through one 40 Mb/s, 40 ms bottleneck with a BDP of queue: each flow its own algorithm
FOUR = """
[profile]
description = "Reno beside longhaul's BPF fractional Reno, Scalable TCP and H-TCP"
repeats = 1

[topology]
pairs = 4
access_rate_mbps = 1000
bottleneck_rate_mbps = 40
rtt_ms = 40
queue = "1bdp"

[tuning]
cca = "reno"
buffer = "large"
""" + "".join(f"""
[[flows]]
name = "{name}"
role = "foreground"
pair = {k}
cca = "{cca}"
duration_s = 16
""" for k, (name, cca) in enumerate(FLOWS.items(), start=1))


def longhaul(*args, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def growth_per_second(rows: list[dict]) -> float:
    """The median slope of cwnd (segments a second) over the stretches of a second or more in which
    it never fell: congestion avoidance between two losses (slow start's are shorter)."""
    cwnd = [(float(r["t_s"]), int(r["cwnd"])) for r in rows if r["cwnd"]]
    slopes, start = [], 0
    for i in range(1, len(cwnd) + 1):
        if i == len(cwnd) or cwnd[i][1] < cwnd[i - 1][1]:
            (t0, c0), (t1, c1) = cwnd[start], cwnd[i - 1]
            if t1 - t0 >= 1.0:
                slopes.append((c1 - c0) / (t1 - t0))
            start = i
    return statistics.median(slopes) if slopes else 0.0


def test_bpf_ccas_carry_a_run_as_their_algorithms_say_and_are_gone_after(tmp_path):
    assert not our_bpf_ccas(), "a BPF congestion control was registered before the test"
    config = write_lab_config(tmp_path, FOUR, "bpf", verify=PATIENT_VERIFY)
    done = longhaul("run", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not our_bpf_ccas(), bpf_ccas.kernel_ccas()                 # unregistered at the run's end
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    recorded = manifest["features"]["bpf_ccas"]
    assert recorded["lh_htcp"]["stands_for"] == "htcp" and len(recorded["lh_htcp"]["sha256"]) == 64
    (cell,) = json.loads((run_dir / "summary.json").read_text())["cells"]
    (trial,) = cell["trials"]
    assert trial["status"] == "ok", trial.get("error")
    flows = {f["name"]: f for f in trial["flows"]}
    for name, cca in FLOWS.items():
        assert flows[name]["observed_cca"] == [cca], flows[name]        # the sockets ran it
        assert flows[name]["mean_mbps"] > 0.5, flows[name]
    assert sum(f["mean_mbps"] for f in flows.values()) <= 40 * 1448 / 1514 * 1.03
    assert trial["collector"]["seconds_above_ceiling"] == 0
    with open(run_dir / "cells" / cell["id"] / "trial-1" / "tcpinfo.csv") as fh:
        rows = list(csv.DictReader(fh))
    slope = {name: growth_per_second([r for r in rows if r["flow"] == name]) for name in FLOWS}
    print("cwnd growth, segments/s:", slope)
    # seed 002's fractional stream grows by a tenth of Reno's segment per RTT (measured here: Reno
    # 13.2-14.7 segments a second between losses, lh_frac10 1.0-1.4)
    assert slope["frac"] > 0 and 6 <= slope["reno"] / slope["frac"] <= 16, slope


def test_a_killed_run_s_bpf_cca_is_unregistered_by_clean(tmp_path):
    config = write_lab_config(tmp_path, FOUR, "bpf", verify=PATIENT_VERIFY)
    run = subprocess.Popen([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # registered as the first lab is built: killed then, while it builds or verifies
        deadline = time.monotonic() + 120
        while our_bpf_ccas() != {"lh_frac10", "lh_scalable", "lh_htcp"} and run.poll() is None:
            assert time.monotonic() < deadline, bpf_ccas.kernel_ccas()
            time.sleep(0.2)
        assert run.poll() is None
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert our_bpf_ccas()                                           # no teardown ran
    cleaned = longhaul("clean", cwd=tmp_path)
    assert cleaned.returncode == 0, cleaned.stderr[-2000:]
    assert "BPF congestion control lh_htcp" in cleaned.stdout + cleaned.stderr
    assert not our_bpf_ccas(), bpf_ccas.kernel_ccas()


def test_a_machine_without_the_objects_refuses_the_cell_at_preflight(tmp_path):
    config = write_lab_config(tmp_path, FOUR, "bpf", verify=PATIENT_VERIFY)
    refused = longhaul("run", "--config", str(config), cwd=tmp_path, env={"LONGHAUL_BPF_DIR": str(tmp_path / "none")})
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "bpf.toml" in refused.stderr and "lh_frac10" in refused.stderr and "is not built" in refused.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())   # nothing set up
    assert not our_bpf_ccas()


FALLBACK = """
[profile]
description = "H-TCP asked for on a kernel without it"
repeats = 1

[topology]
pairs = 1
access_rate_mbps = 1000
bottleneck_rate_mbps = 20
rtt_ms = 20
queue = "1bdp"

[tuning]
cca = "htcp"
cca_fallback = "bpf"

[[flows]]
name = "fg"
role = "foreground"
duration_s = 6
"""


@pytest.mark.skipif("htcp" in bpf_ccas.kernel_ccas(), reason="this kernel has H-TCP: nothing to fall back from")
def test_htcp_runs_as_its_bpf_version_where_the_profile_allows_it_and_is_refused_where_not(tmp_path):
    config = write_lab_config(tmp_path, FALLBACK, "fallback", verify=PATIENT_VERIFY)
    done = longhaul("run", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not our_bpf_ccas(), bpf_ccas.kernel_ccas()
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    (cell,) = json.loads((run_dir / "summary.json").read_text())["cells"]
    assert cell["labels"]["cca_stand_ins"] == {"htcp": "lh_htcp"}
    (flow,) = cell["trials"][0]["flows"]
    assert flow["cca"] == "lh_htcp" and flow["observed_cca"] == ["lh_htcp"], flow     # what the socket ran
    assert "htcp ran as lh_htcp (BPF" in next(run_dir.glob("report*.html")).read_text()

    (tmp_path / "profiles" / "fallback.toml").write_text(FALLBACK.replace('cca_fallback = "bpf"\n', ""))
    refused = longhaul("check", "--config", str(config), cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "htcp" in refused.stderr and 'cca_fallback = "bpf" runs longhaul\'s lh_htcp instead' in refused.stderr
