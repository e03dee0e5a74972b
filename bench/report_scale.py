"""The report and the console on a sweep the size of seed 001's: 630 cells x 10 trials.

The store is synthetic (tests/support/sweep_fixtures.py: 3 CCAs x 10 stream counts x 3 buffers x 7
RTTs, 20 s a trial), written in the documented format. Timed, wall clock, each on its own:
`longhaul report RUN --format html` (the overview page and a page per cell) and `--format pdf`
(the overview), and the console's pages for that run (in process, through Starlette's test
client). Goals (issue 28): report.html at most 5 MB, every cell linked, each format in at most 60 s.
No root needed. Writes bench/RESULTS-report-scale.md.

    .venv/bin/python bench/report_scale.py [--trials 10]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

import sweep_fixtures  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from longhaul.appliance.console.app import ConsoleSettings, create_app  # noqa: E402
from longhaul.reports.cell_pages import CELL_PAGES  # noqa: E402

OUT = HERE / "RESULTS-report-scale.md"
LONGHAUL = Path(sys.executable).with_name("longhaul")


def timed(argv: list[str]) -> float:
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def page_times(store: Path, run: str) -> dict[str, float]:
    """Seconds to each page's answer; for the run and compare pages also until the part they fetch
    (the study sections, the comparison) is ready, and the run page again once it is computed."""
    out = {}
    with TestClient(create_app(ConsoleSettings(store))) as client:
        def timed_get(name: str, url: str) -> None:
            t0 = time.monotonic()
            assert client.get(url).status_code == 200, url
            out[name] = time.monotonic() - t0

        def until_ready(name: str, url: str, since: float) -> None:
            while (status := client.get(url).status_code) == 202:
                pass
            assert status == 200, url
            out[name] = time.monotonic() - since

        timed_get("runs page", "/runs")
        t0 = time.monotonic()
        timed_get("run page (its tables)", f"/runs/{run}")
        until_ready("run page: its study sections ready", f"/runs/{run}/sections", t0)
        timed_get("run page, computed", f"/runs/{run}")
        timed_get("cell page", f"/runs/{run}/cells/seed001-314")
        t0 = time.monotonic()
        timed_get("compare page", f"/compare?a={run}&b={run}")
        until_ready("compare page: its result ready", f"/compare/result?a={run}&b={run}", t0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lh-bench-scale-"))
    try:
        return measure(root, args.trials)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure(root: Path, trials: int) -> int:
    t0 = time.monotonic()
    run = sweep_fixtures.make_sweep_store(root, trials=trials)
    made = time.monotonic() - t0
    html_s = timed([str(LONGHAUL), "report", str(run), "--format", "html"])
    size = (run / "report.html").stat().st_size
    pages = sorted((run / CELL_PAGES).glob("*.html"))
    linked = set(re.findall(rf'href="{CELL_PAGES}/([^"]+)\.html"', (run / "report.html").read_text()))
    pdf_s = timed([str(LONGHAUL), "report", str(run), "--format", "pdf"])
    pdf_size = (run / "report.pdf").stat().st_size
    pages_s = page_times(root, run.name)
    cells = len(list((run / "cells").iterdir()))
    lines = [
        "# A sweep the size of seed 001's: the report and the console",
        "",
        f"`.venv/bin/python bench/report_scale.py --trials {trials}` on {dt.date.today()}, "
        f"{platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()}).",
        f"Synthetic store: {cells} cells x {trials} trials (tests/support/sweep_fixtures.py), written in {made:.1f} s.",
        "",
        "| what | measured | goal |",
        "|---|---|---|",
        f"| `longhaul report --format html` | {html_s:.1f} s | at most 60 s |",
        f"| report.html | {size / 1e6:.2f} MB | at most 5 MB |",
        f"| cell pages written / linked from report.html | {len(pages)} / {len(linked & {p.stem for p in pages})} of {cells} | every cell |",
        f"| cell pages, total | {sum(p.stat().st_size for p in pages) / 1e6:.1f} MB | |",
        f"| `longhaul report --format pdf` | {pdf_s:.1f} s ({pdf_size / 1e6:.2f} MB) | at most 60 s |",
        *(f"| console: {name} | {s * 1000:.0f} ms | |" for name, s in pages_s.items()),
        "",
        "The overview page holds the header, the verification and results tables (each cell id links",
        "its page), heat maps over the sweep's axes and the studies' sections (the throughput-profile",
        "section's profile plots); each cell's page holds its tables and one figure of throughput and",
        "RTT over all its trials. The PDF is the overview; per-cell figures stay in the HTML.",
        "",
        "The console's run page answers with its header and tables and fetches the studies' sections",
        "when they are computed (appliance/console/derived.py: once per state of the store, shared by",
        "every viewer); the compare page likewise fetches the comparison.",
    ]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = html_s <= 60 and pdf_s <= 60 and size <= 5e6 and len(pages) == cells == len(linked)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
