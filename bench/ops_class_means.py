"""How far each background class's passive RTT moves from one recording to the next: the drift
that held-out accuracy pays for (bench/RESULTS-ops.md).

    .venv/bin/python bench/ops_class_means.py datasets/ops-overlay1-s4.csv datasets/ops-overlay1-s5.csv ...

One row per recording: when it was made, the kernel build, and per class the mean ± standard
deviation of its passive probe values in ms. The idle class's spread is the probe's own noise
(the path is empty: every round should read the configured RTT).
"""
from __future__ import annotations

import argparse

import numpy as np

from longhaul.collectors.studies.ops import dataset as ds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--probing", default="passive", choices=ds.PROBING)
    args = ap.parse_args()
    loaded = [ds.load(p) for p in args.datasets]
    classes = list(dict.fromkeys(c for d in loaded for c in d.classes))
    print("| recording | recorded | kernel | " + " | ".join(classes) + " |")
    print("|---|---|---|" + "---|" * len(classes))
    for d in loaded:
        cells = []
        for c in classes:
            runs = [r.rtt_ms for r in d.runs if r.cls == c and r.probing == args.probing]
            v = np.concatenate(runs) if runs else np.empty(0)
            cells.append(f"{v.mean():.1f} ± {v.std():.1f}" if len(v) else "–")
        print(f"| {d.path.stem} | {d.meta.get('recorded', '?')} | {d.lab.get('kernel', '?')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
