"""What a BPF congestion control costs beside the kernel's own (issue 27 item 3): Reno built in
against `lh_frac1`, Reno in BPF (hardware/bpfcca/lh_frac.bpf.c with FACTOR 1), one iperf3 stream
over loopback inside a scratch namespace, paced at 10 Gb/s and unpaced, alternated ROUNDS times
in one sitting (this machine's speed drifts: the ratio of neighbours is what counts). Throughput
and CPU (iperf3's own, sender host total) side by side.

    sudo .venv/bin/python bench/bpf_cca_cost.py      # ~3 minutes; writes bench/RESULTS-bpf-cca.md
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from longhaul.hardware import bpf_ccas, run_marker

OUT = Path(__file__).resolve().parent / "RESULTS-bpf-cca.md"
ROUNDS, SECONDS = 5, 5
RATES = {"10 Gb/s": "10G", "unpaced": "0"}
CCAS = ("reno", "lh_frac1")


def one(ns: str, cca: str, rate: str) -> tuple[float, float]:
    """(Gb/s received, sender CPU %) of one SECONDS-long stream."""
    inns = ["ip", "netns", "exec", ns]
    server = subprocess.Popen([*inns, "iperf3", "-s", "-1", "-p", "5299"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while "5299" not in subprocess.run([*inns, "ss", "-ltnH"], capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline, "iperf3 -s did not listen"
            time.sleep(0.05)
        done = subprocess.run([*inns, "iperf3", "-c", "127.0.0.1", "-p", "5299", "-C", cca, "-t", str(SECONDS),
                               "-b", rate, "-J"], capture_output=True, text=True, timeout=SECONDS + 30)
    finally:
        server.wait(timeout=30)
    data = json.loads(done.stdout)
    assert data["end"]["sender_tcp_congestion"] == cca, data["end"].get("sender_tcp_congestion")
    return data["end"]["sum_received"]["bits_per_second"] / 1e9, data["end"]["cpu_utilization_percent"]["host_total"]


def main() -> int:
    reason = bpf_ccas.unavailable_reason()
    if reason or not bpf_ccas.BPF_CCAS["lh_frac1"].object.is_file():
        print(f"skipped: {reason or 'lh_frac1 is not built (make setup)'}")
        return 0
    tag = f"bench{os.getpid()}"[:6]
    ns = f"lh-probe-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        run_marker.register(tag, Path("/tmp"))
        with bpf_ccas.held(tag) as holding:
            holding.ensure(["lh_frac1"])
            for _ in range(ROUNDS):
                for label, rate in RATES.items():
                    for cca in CCAS:
                        got.setdefault((label, cca), []).append(one(ns, cca, rate))
    finally:
        run_marker.unregister(tag)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    lines = ["# BPF congestion control against the kernel's own", "",
             f"`sudo .venv/bin/python bench/bpf_cca_cost.py`: one iperf3 stream over loopback in a namespace, "
             f"{SECONDS} s, the two algorithms alternated {ROUNDS} times per rate in one sitting "
             f"({time.strftime('%Y-%m-%d')}, kernel {os.uname().release}). Medians; the ratio is BPF / built in.", "",
             "| rate | reno Gb/s | lh_frac1 Gb/s | ratio | reno sender CPU % | lh_frac1 sender CPU % | ratio |",
             "|---|---|---|---|---|---|---|"]
    for label in RATES:
        k = {cca: (statistics.median(g for g, _ in got[(label, cca)]), statistics.median(c for _, c in got[(label, cca)]))
             for cca in CCAS}
        (kg, kc), (bg, bc) = k["reno"], k["lh_frac1"]
        lines.append(f"| {label} | {kg:.2f} | {bg:.2f} | {bg / kg:.3f} | {kc:.1f} | {bc:.1f} | {bc / kc:.3f} |")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
