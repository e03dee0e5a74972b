"""The embedded lab's fidelity at 128 ms (needs root; about 3 minutes): bench/RESULTS.md. The
overhead of a run and the sampler's cost have benchmarks of their own (bench/overhead.py,
bench/sampler_cost.py), which `make bench` runs after this one."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fidelity  # noqa: E402

OUT = Path(__file__).resolve().parent / "RESULTS.md"


def main() -> None:
    fid = fidelity.run()
    lines = [
        "# Benchmark results (embedded lab)", "",
        f"Written by `make bench` (bench/run_all.py) on {time.strftime('%Y-%m-%d', time.gmtime())}: "
        f"{platform.node()}, kernel {platform.release()}, {os.cpu_count()} cores, delay by the userspace delay line "
        "(no netem on this kernel). Numbers vary run to run on this shared 2-core VM; rerun to compare.", "",
        "## Fidelity: 128 ms RTT, 1-BDP queue, one CUBIC flow for 30 s", "",
        "| bottleneck | idle RTT configured / measured | rate measured (shaper counter) | verification | "
        "max queueing delay measured / expected | CUBIC goodput | fraction of bottleneck |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in fid["rows"]:
        lines.append(f"| {r['rate_mbps']:g} Mb/s | {r['rtt_configured_ms']:g} / {_f(r['rtt_measured_ms'])} ms | "
                     f"{_f(r['rate_measured_mbps'])} Mb/s | {'ok' if r['verification_ok'] else 'refused'} | "
                     f"{_f(r['max_queueing_delay_ms'])} / {r['expected_max_queueing_delay_ms']} ms | "
                     f"{_f(r['cubic_goodput_mbps'])} Mb/s | {_f(r['cubic_fraction'], 3)} |")
    lines += [
        "", "Max queueing delay is the largest 10 ms-interval probe RTT minus the idle RTT; expected is queue "
        "bytes / bottleneck rate. CUBIC goodput is payload (TCP/IP/Ethernet headers excluded: at MTU 1500 the "
        "payload ceiling is 1448/1514 = 95.6 % of the shaped rate). The excess queueing delay over the "
        "bottleneck queue's own comes from the sender's access queue (TCP small queues let each socket keep "
        "about 1 MB queued there, ~8 ms at 1 Gb/s) and from the delay line's late wake-ups on this VM, whose "
        "timers fire up to tens of ms late under load (hardware/delayline/delayline.c).", "",
        "The overhead of a run beyond its flows is in RESULTS-overhead.md (bench/overhead.py), the "
        "collectors' CPU cost in RESULTS-sampler.md (bench/sampler_cost.py).", "",
        "Raw: ```" + json.dumps({"fidelity": fid}) + "```", "",
    ]
    OUT.write_text("\n".join(lines))
    print(OUT.read_text())


def _f(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
