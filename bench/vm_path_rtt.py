"""What an idle fleet of TCG VMs does to a path's RTT (issue 42, item 4): one pair's fleet (S1, R1,
R2, D1) booted from build/image with nothing else running, then, bare and with netem's 10 ms on
each router's WAN egress (a 20 ms path, as vm-smoke's), rounds of: iputils ping (C) 20 ms and 1 ms
apart, longhaul's echo agent as path_floor reads a floor (50 echoes 20 ms apart) and as
verification and the probe read the idle RTT (30 echoes 1 ms apart), and single hops (R1 -> R2, S1 ->
R1). Also each VM's qemu CPU while idle. Prints one line per round.

    .venv/bin/python bench/vm_path_rtt.py [--rounds 3]          (as root; ~8 min)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from longhaul.core.paths import REPO
from longhaul.drivers.agents import icmp_echo
from longhaul.hardware.backends.qemu import fleet as qf
from longhaul.hardware.backends.qemu import plan as qp
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.executors.process import Executor, ProcessTable

D1 = "10.222.1.2"
R2_WAN = "10.220.0.2"
R1_S1 = "10.221.1.1"


def spread(rtts: list[float]) -> str:
    rtts = sorted(rtts)
    n = len(rtts)
    return (f"n={n} min={rtts[0]:.2f} p10={rtts[n // 10]:.2f} median={statistics.median(rtts):.2f} "
            f"p90={rtts[9 * n // 10]:.2f} max={rtts[-1]:.2f}")


class Fleet:
    def __init__(self, workdir: Path):
        shown = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout
        plan = qp.fleet_plan("lhvr", qp.free_index(os.getpid(), shown), 1, ns="lh-lhvr")
        self.vms = qf.VmFleet(plan, REPO / "build" / "image", workdir, ProcessTable(), boot_timeout_s=900)
        self._hosts: dict[str, Executor] = {}

    def host(self, vm: str) -> Executor:
        if vm not in self._hosts:
            self._hosts[vm] = load_inventory(self.vms.inventory_path).executor(vm, ProcessTable())
        return self._hosts[vm]

    def ping(self, src: str, dst: str, count: int = 200, interval_s: float = 0.02) -> list[float]:
        host = self.host(src)
        host.run(["ping", "-n", "-q", "-c", "3", dst])   # the neighbours resolved first, as the agent's warm-up echo does
        out = host.run(["ping", "-n", "-i", f"{interval_s:g}", "-c", str(count), dst], timeout=300).stdout
        return [float(line.split("time=")[1].split()[0]) for line in out.splitlines() if "time=" in line]

    def agent(self, src: str, dst: str, count: int, period_ms: float) -> list[float]:
        argv = ["/opt/longhaul/.venv/bin/python", *icmp_echo.argv(dst, count, period_ms)[1:]]
        return [r for r in icmp_echo.parse(self.host(src).run(argv, timeout=120).stdout) if r is not None]

    def netem(self, router: str, delay_ms: float) -> None:
        self.host(router).run(["tc", "qdisc", "replace", "dev", "wan", "root", "netem", "delay", f"{delay_ms:g}ms",
                               "limit", "10000"])


def qemu_cpu_percent(seconds: float = 10) -> dict[str, float]:
    """Each VM's qemu: CPU time over `seconds`, as % of one core."""
    names = {}
    for line in subprocess.run(["pgrep", "-a", "qemu-system"], capture_output=True, text=True).stdout.splitlines():
        pid, args = line.split(maxsplit=1)
        if "-name " in args:
            names[pid] = args.split("-name ")[1].split()[0]

    def ticks() -> dict[str, int]:
        return {p: sum(int(x) for x in Path(f"/proc/{p}/stat").read_text().split(")")[1].split()[11:13]) for p in names}
    before = ticks()
    time.sleep(seconds)
    after = ticks()
    return {names[p]: round((after[p] - before[p]) / os.sysconf("SC_CLK_TCK") / seconds * 100, 1) for p in names}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lh-vmrtt-") as tmp:
        fleet = Fleet(Path(tmp) / "fleet")
        t0 = time.monotonic()
        try:
            fleet.vms.boot()
            print(f"booted in {time.monotonic() - t0:.0f} s; idle qemu CPU %: {qemu_cpu_percent()}", flush=True)
            for label in ("bare", "netem 2 x 10 ms"):
                if label != "bare":
                    for router in ("R1", "R2"):
                        fleet.netem(router, 10)
                for _ in range(args.rounds):
                    print(f"{label}: ping S1->D1 20 ms apart: {spread(fleet.ping('S1', D1))}", flush=True)
                    print(f"{label}: ping S1->D1 1 ms apart:  {spread(fleet.ping('S1', D1, 200, 0.001))}", flush=True)
                    print(f"{label}: agent 50 x 20 ms (floor): {spread(fleet.agent('S1', D1, 50, 20))}", flush=True)
                    print(f"{label}: agent 30 x 1 ms (idle):   {spread(fleet.agent('S1', D1, 30, 1))}", flush=True)
                print(f"{label}: ping R1->R2 (one hop):   {spread(fleet.ping('R1', R2_WAN))}", flush=True)
                print(f"{label}: ping S1->R1 (one hop):   {spread(fleet.ping('S1', R1_S1))}", flush=True)
        finally:
            failures = fleet.vms.close()
            if failures:
                print("teardown:", json.dumps(failures), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
