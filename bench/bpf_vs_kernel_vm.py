"""longhaul's BPF congestion controls checked against the kernel's own (issue 27 item 3): on the
qemu VMs of the appliance image, whose Debian kernel has tcp_htcp and tcp_scalable, the
vm-bpf-vs-kernel profile runs one flow at a time over the same shaped path (10 Mb/s, 40 ms, a
BDP of drop-tail queue) with H-TCP, lh_htcp, Scalable TCP, lh_scalable, Reno and lh_frac1 (Reno in
BPF), each cell `repeats` times, the kernel's and BPF's cells alternating in one sitting.

What is compared, per algorithm, kernel beside BPF, from the store (tcpinfo.csv and the trial
summaries): throughput, retransmitted segments, the sender's mean cwnd, the decrease factor at each
loss event (cwnd at the event's peak against its trough, the algorithm's beta) and the events'
spacing (the growth rule: how long a window takes to fill the queue again). Agreement within the
stated tolerance is the claim; this machine's kernel has neither module, so only the VMs can say.

    .venv/bin/python bench/bpf_vs_kernel_vm.py [--work DIR] [--resume RUN] [--analyse RUN]
    # ~15 minutes under TCG (a fleet boot, one lab, 12 trials); writes bench/RESULTS-bpf-vs-kernel.md
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from longhaul.collectors.store.format import TCPINFO_CSV
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.series import read_rows

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "RESULTS-bpf-vs-kernel.md"
PROFILE = "vm-bpf-vs-kernel"
PAIRS = (("htcp", "lh_htcp"), ("scalable", "lh_scalable"), ("reno", "lh_frac1"))
TOLERANCE = 0.10          # |BPF / kernel - 1| for the means
DROP = 0.97               # a sample below DROP x the running peak ends a growth phase


def config_text(image: Path) -> str:
    """config-vm.toml's lab, store and TCG verification, with this profile alone."""
    text = (REPO / "config-vm.toml").read_text()
    text = text.replace('image = "build/image"', f'image = "{image}"')
    text = text.replace('profiles = ["vm-tools", "vm-smoke"]', f'profiles = ["{PROFILE}"]')
    return text.replace('profile_dir = "profiles"', f'profile_dir = "{REPO / "profiles"}"').replace(
        'formats = ["html", "pdf"]', 'formats = ["html"]')


def sawtooth(cwnd: np.ndarray) -> tuple[list[float], list[int]]:
    """(trough / peak of each decrease, sample index of each peak) of a cwnd series: a decrease is
    a fall below DROP x the peak since the last trough; its trough is the least value before growth
    resumes."""
    betas, peaks = [], []
    peak_i, i = 0, 1
    while i < len(cwnd):
        if cwnd[i] >= cwnd[peak_i]:
            peak_i = i
        elif cwnd[i] < DROP * cwnd[peak_i]:
            j = i
            while j + 1 < len(cwnd) and cwnd[j + 1] <= cwnd[j]:
                j += 1
            betas.append(float(cwnd[j] / cwnd[peak_i]))
            peaks.append(peak_i)
            peak_i, i = j, j
        i += 1
    return betas, peaks


def trial_numbers(run, entry) -> dict:
    out: dict[str, list[float]] = {"mbps": [], "retrans": [], "cwnd": [], "beta": [], "period_s": []}
    for trial in entry.trials:
        if trial.status != "ok":
            continue
        (flow,) = trial.flows
        out["mbps"].append(flow.mean_mbps)
        out["retrans"].append(flow.retransmits)
        rows = read_rows(run.trial_dir(entry.id, trial.trial) / TCPINFO_CSV, []) or []
        rows = [r for r in rows if r.get("flow") == "fg" and r.get("cwnd")]
        t = np.array([float(r["t_s"]) for r in rows])
        cwnd = np.array([float(r["cwnd"]) for r in rows])
        steady = t >= 2.0                      # after slow start's first loss
        if steady.sum() < 10:
            continue
        out["cwnd"].append(float(cwnd[steady].mean()))
        betas, peaks = sawtooth(cwnd[steady])
        out["beta"] += betas
        out["period_s"] += list(np.diff(t[steady][peaks])) if len(peaks) > 1 else []
    return out


def analyse(run_dir: Path) -> str:
    run = load_store(run_dir)
    by_cca = {}
    for entry in run.entries:
        (flow,) = entry.flows
        by_cca[flow.cca] = trial_numbers(run, entry)
    vm = (run.manifest.features or {}).get("vm_lab", {})
    lines = ["# BPF congestion controls against the kernel's own, on the appliance's VMs\n",
             f"`.venv/bin/python bench/bpf_vs_kernel_vm.py` (profile `{PROFILE}`): run `{run.run_id}`, "
             f"kernel {vm.get('kernel', '?')} in the VMs ({vm.get('accel', '?')}), status {run.status}. "
             "One iperf3 flow a cell over 10 Mb/s, 40 ms, a BDP of drop-tail queue, 20 s, the cells in "
             "the order kernel, BPF, kernel, BPF, ...; the sender's cwnd sampled at 10 Hz (tcpinfo.csv) "
             "after the first 2 s. beta: cwnd at a decrease's trough / at its peak; period: seconds "
             f"between peaks. Means over trials (over events for beta and period); agreement: within "
             f"{TOLERANCE:.0%}.\n",
             "| algorithm | metric | kernel | BPF | BPF / kernel | agrees |", "|---|---|---|---|---|---|"]
    verdicts = []
    for kernel, bpf in PAIRS:
        a, b = by_cca.get(kernel), by_cca.get(bpf)
        if not a or not b:
            lines.append(f"| {kernel} / {bpf} | not run | | | | |")
            continue
        for metric, what in (("mbps", "throughput Mb/s"), ("retrans", "retransmits"), ("cwnd", "mean cwnd (segments)"),
                             ("beta", "beta (trough / peak)"), ("period_s", "period s")):
            if not a[metric] or not b[metric]:
                lines.append(f"| {kernel} / {bpf} | {what} | - | - | | |")
                continue
            ka, kb = statistics.fmean(a[metric]), statistics.fmean(b[metric])
            ratio = kb / ka if ka else float("nan")
            n = f" (n {len(a[metric])}, {len(b[metric])})" if metric in ("beta", "period_s") else ""
            if metric == "retrans":
                said = "not judged"
            else:
                agrees = abs(ratio - 1) <= TOLERANCE
                verdicts.append(agrees)
                said = "yes" if agrees else "**no**"
            lines.append(f"| {kernel} / {bpf} | {what}{n} | {ka:.3g} | {kb:.3g} | {ratio:.3f} | {said} |")
    lines.append("")
    lines.append(f"{sum(verdicts)} of {len(verdicts)} judged rows agree. Retransmitted segments are shown, not "
                 "judged: how many segments a loss event costs depends on recovery (SACK, PRR, RACK), which is the "
                 "kernel's in both cases, and on the emulated hosts' stalls; the algorithms decide when and by "
                 "how much the window falls, which the rows above compare.")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/work/lab-runs/bpf-vs-kernel"))
    ap.add_argument("--image", type=Path, default=REPO / "build" / "image")
    ap.add_argument("--resume", type=Path, help="a run of this bench to finish")
    ap.add_argument("--analyse", type=Path, help="only write the results of this run")
    args = ap.parse_args()
    if args.analyse is None:
        args.work.mkdir(parents=True, exist_ok=True)
        config = args.work / "config.toml"
        config.write_text(config_text(args.image.resolve()))
        argv = [sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)]
        argv += ["--resume", str(args.resume)] if args.resume else []
        done = subprocess.run(argv, cwd=args.work, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"longhaul run exited {done.returncode}", file=sys.stderr)
            return done.returncode
        args.analyse = Path(done.stdout.strip().splitlines()[-1])
    OUT.write_text(analyse(args.analyse))
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
