"""What a shared SSH connection saves per command (hardware/executors/ssh_masters.py), side by side
on one booted qemu fleet: the same short commands through SshExecutor(share=False) and
SshExecutor(share=True), alternated so that the machine's drift hits both alike.

    .venv/bin/python bench/ssh_sharing.py [--rounds 10] [--out bench/RESULTS-ssh.md]

Needs root, qemu and the appliance image (make image); boots one pair (4 VMs) and tears it down.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from longhaul.core.paths import REPO
from longhaul.hardware.backends.qemu import fleet as qemu_fleet
from longhaul.hardware.backends.qemu import plan as qemu_plan
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.executors.process import LocalExecutor, ProcessTable
from longhaul.hardware.executors.ssh_masters import MASTERS

COMMANDS = {"true": ["true"], "read a counter": ["cat", "/proc/net/snmp"], "tc -s qdisc": ["tc", "-s", "qdisc", "show"]}


def timed(executor, argv) -> float:
    t0 = time.monotonic()
    executor.run(argv)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS-ssh.md")
    args = ap.parse_args()
    procs = ProcessTable()
    pid = os.getpid()
    shown = LocalExecutor("controller", ProcessTable()).run(["ip", "-j", "-4", "addr"]).stdout
    plan = qemu_plan.fleet_plan(f"lq{pid}", qemu_plan.free_index(pid, shown), 1, ns=f"lh-q{pid}")
    fleet = qemu_fleet.VmFleet(plan, REPO / "build" / "image", Path(tempfile.mkdtemp(prefix="lh-sshb-")), procs)
    try:
        fleet.start()
        inventory = load_inventory(fleet.inventory_path)
        plain = inventory.executor("R1", ProcessTable())
        plain.share = False
        shared = inventory.executor("R1", ProcessTable())
        shared.run(["true"])                       # the master's own handshake is paid once, here
        rows = {}
        for name, argv in COMMANDS.items():
            times: dict[str, list[float]] = {"plain": [], "shared": []}
            for _ in range(args.rounds):
                times["plain"].append(timed(plain, argv))
                times["shared"].append(timed(shared, argv))
            rows[name] = {k: round(statistics.median(v), 3) for k, v in times.items()}
            rows[name]["ratio"] = round(rows[name]["plain"] / rows[name]["shared"], 1)
        result = {"accel": fleet.accel, "kernel": fleet.kernel, "rounds": args.rounds, "boot_s": fleet.boot_seconds,
                  "commands": rows}
    finally:
        MASTERS.close_all()
        fleet.close()
    table = "\n".join(f"| `{' '.join(COMMANDS[n])}` | {r['plain']:.3f} s | {r['shared']:.3f} s | {r['ratio']:g}x |"
                      for n, r in rows.items())
    args.out.write_text(
        f"# SSH connection sharing on the qemu lab\n\nWritten by `.venv/bin/python bench/ssh_sharing.py` on "
        f"{time.strftime('%Y-%m-%d')}: one router VM ({result['accel']}, kernel {result['kernel']}), each command "
        f"{args.rounds} times over a new connection and over the shared one, alternated; medians.\n\n"
        "| command | new connection | shared connection | ratio |\n|---|---|---|---|\n"
        f"{table}\n\nRaw: ```{json.dumps(result)}```\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
