"""The InfluxDB store on the real embedded lab: influxd killed (SIGKILL) in the middle of a run and
started again later, or frozen (SIGSTOP) for 30 s; the run goes on, and at its end the database
holds exactly the points of the run's files, each once, with every lab host's Telegraf points
tagged with the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from influxd import InfluxServer
from lab_support import requires_lab, write_lab_config

from longhaul.collectors.live.telegraf import LOCAL_BINARY
from longhaul.collectors.store.influx.backfill import rebuild_spool, spooled_counts
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.influx.spool import ShipState, spool_dir
from longhaul.collectors.store.influx.targets import V1Target
from longhaul.hardware.executors.process import wait_until

pytestmark = [pytest.mark.lab, requires_lab, pytest.mark.timeout(900),
              pytest.mark.skipif(shutil.which("influxd") is None, reason="influxd not installed (make setup)"),
              pytest.mark.skipif(not LOCAL_BINARY.is_file(), reason="Telegraf not built (make telegraf builds it where a Go >= 1.25 is)")]

PROFILE = """
[profile]
description = "one flow, many short trials"
repeats = {repeats}

[topology]
pairs = 1
access_rate_mbps = 1000
bottleneck_rate_mbps = 100
rtt_ms = 20
queue = "1bdp"

[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 4
"""

LAB_HOSTS = {"S1", "R1", "R2", "D1"}
TELEGRAF = ("cpu", "net", "nstat", "netstat", "lh_host_tcpinfo")


def trials_done(root: Path) -> int:
    return len(list(root.glob("*/cells/*/trial-*/trial.json")))


def run_with_fault(tmp_path: Path, repeats: int, fault) -> tuple[Path, InfluxServer, str]:
    (tmp_path / "db").mkdir()
    server = InfluxServer(tmp_path / "db").start()
    server.create_db("longhaul")
    config = write_lab_config(tmp_path, PROFILE.format(repeats=repeats))
    config.write_text(config.read_text().replace(
        '[store]\ndir = "runs"\n',
        f'[store]\ndir = "runs"\ninflux = {{ url = "{server.url}", database = "longhaul", timeout_s = 2, drain_s = 60 }}\n'))
    proc = subprocess.Popen([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "500"})      # no wrapped messages
    faulted = threading.Thread(target=fault, args=(server, tmp_path / "runs"), daemon=True)
    faulted.start()
    try:
        out, _ = proc.communicate(timeout=800)
    finally:
        if proc.poll() is None:
            proc.kill()
        faulted.join(timeout=120)
    assert proc.returncode == 0, out[-4000:]
    return Path(out.strip().splitlines()[-1]), server, out


def check_database(run_dir: Path, server: InfluxServer, tmp_path: Path) -> None:
    state = ShipState(spool_dir(run_dir))
    assert state.complete and state.unshipped_bytes(spool_dir(run_dir)) == 0 and state.rejected == 0
    spooled = spooled_counts(run_dir)
    target = V1Target(InfluxSettings(url=server.url, database="longhaul"), Credential(None, "-"))
    try:
        in_db = {m: sum(1 for _ in target.rows(m, {"run": run_dir.name})) for m in spooled}
        assert in_db == dict(spooled)            # every point, each once
        # longhaul's own points are exactly what the run's files give
        copy = Path(shutil.copytree(run_dir, tmp_path / "copy" / run_dir.name))
        for path in spool_dir(copy).glob("telegraf-*.lp"):
            path.unlink()
        rebuild_spool(copy, [])
        for measurement, count in spooled_counts(copy).items():
            assert in_db[measurement] == count, measurement
        # Telegraf on every lab host, tagged with the run
        for measurement in TELEGRAF:
            hosts = {row["host"] for row in target.rows(measurement, {"run": run_dir.name})}
            wanted = {"S1", "D1"} if measurement == "lh_host_tcpinfo" else LAB_HOSTS   # sockets: end hosts
            assert wanted <= hosts, (measurement, hosts)
    finally:
        target.close()


def test_influxd_killed_mid_run_and_restarted_loses_nothing(tmp_path):
    def kill_then_restart(server: InfluxServer, runs: Path) -> None:
        wait_until(lambda: trials_done(runs) >= 1, timeout=300, interval=0.2, what="the first trial")
        server.kill()
        done = trials_done(runs)
        wait_until(lambda: trials_done(runs) >= done + 2, timeout=300, interval=0.2, what="two more trials")
        server.start()

    run_dir, server, out = run_with_fault(tmp_path, 6, kill_then_restart)
    try:
        # the first write after the kill meets either a closed port ("connection refused") or the
        # shipper's kept-alive connection reset ("Connection aborted"): both are an outage said once
        assert "; the run goes on and its points wait" in out and "is back after" in out, out[-3000:]
        check_database(run_dir, server, tmp_path)
    finally:
        server.stop()


def test_influxd_frozen_for_30_s_loses_nothing(tmp_path):
    thawed = threading.Event()

    def freeze_30_s(server: InfluxServer, runs: Path) -> None:
        wait_until(lambda: trials_done(runs) >= 1, timeout=300, interval=0.2, what="the first trial")
        server.freeze()
        thawed.wait(30)              # the outage itself: 30 s of a server that accepts and never answers
        server.thaw()

    run_dir, server, out = run_with_fault(tmp_path, 8, freeze_30_s)
    try:
        assert "no answer within 2 s" in out
        check_database(run_dir, server, tmp_path)
    finally:
        server.stop()
