"""The report's seed 002 section (Tables I-V, appropriation), rendered through its template from a
synthetic run store of the parallel-tcp-stiff-udp profile's scenarios with plausible numbers: the
paper's Baseline, Parallel and Combined rows (one Reno stream beside BPF fractional ones)."""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import report_fixtures

from longhaul.collectors.store.reader import load_store
from longhaul.collectors.studies import registry
from longhaul.collectors.studies.stiff_udp import cases as stiff_udp_cases
from longhaul.collectors.studies.stiff_udp import section as stiff_udp_section
from longhaul.reports import render
from longhaul.reports.render import render_section

TAU, M, PERIOD, INTERVAL_MS = 240.0, 100.0, 9.8696, 10.0
I_MBPS = 84 * 8 / (INTERVAL_MS / 1000) / 1e6          # fping's 84-byte echo every 10 ms
PROFILE = "parallel-tcp-stiff-udp"
# scenario -> (tcp streams, UDP (min, max) or None, tcp Mb/s, cross Mb/s, UDP loss %, median RTT ms
# [, the fractional streams' cca: a combined method, one "tcp" stream and streams - 1 "frac" ones])
SCENARIOS = {
    "udp1-10-p1": (1, (1, 10), 70.0, None, 0.05, 68.0),
    "udp1-10-p5": (5, (1, 10), 85.0, None, 0.20, 72.0),
    "udp1-10-p9": (9, (1, 10), 87.0, None, 0.40, 75.0),
    "udp50-80-p1": (1, (50, 80), 20.0, None, 0.02, 66.0),
    "udp50-80-p5": (5, (50, 80), 28.0, None, 0.10, 69.0),
    "udp50-80-p9": (9, (50, 80), 31.0, None, 0.20, 90.0),
    "cross-p1": (1, None, 16.0, 75.0, None, 70.0),
    "cross-p5": (5, None, 46.0, 46.0, None, 71.0),
    "cross-p9": (9, None, 61.0, 31.0, None, 72.0),
    "udp1-10-c5": (5, (1, 10), 83.0, None, 0.10, 85.0, "lh_frac10"),
    "udp1-10-c9": (9, (1, 10), 84.0, None, 0.12, 99.0, "lh_frac10"),
    "udp50-80-c5": (5, (50, 80), 21.0, None, 0.04, 68.0, "lh_frac10"),
    "udp50-80-c9": (9, (50, 80), 27.0, None, 0.09, 79.0, "lh_frac10"),
    "cross-c5": (5, None, 20.0, 70.0, None, 70.0, "lh_frac10"),
    "cross-c9": (9, None, 30.0, 62.0, None, 71.0, "lh_frac10"),
    "cross-c9-m100": (9, None, 18.5, 73.0, None, 70.0, "lh_frac100"),
}
COMBINED_SHARE = 0.4     # of a combined method's Mb/s, what its unmodified stream carries
# the profile's reference values (seed 002 as printed)
REFS = {"udp1-10-p1": {"tcp": 64.5, "achieved_pct": 65.8, "rtt_ms": 68.65, "sqrt_p": 0.261},
        "udp1-10-p5": {"tcp": 84.5, "achieved_pct": 86.74, "rtt_ms": 73.01, "sqrt_p": 0.436},
        "udp1-10-p9": {"tcp": 86.63, "achieved_pct": 87.95, "rtt_ms": 74.94, "sqrt_p": 0.648},
        "udp50-80-p1": {"tcp": 18.25, "achieved_pct": 51.65, "rtt_ms": 67.92, "sqrt_p": 0.158},
        "udp50-80-p5": {"tcp": 27.6, "achieved_pct": 78.85, "rtt_ms": 69.57, "sqrt_p": 0.313},
        "udp50-80-p9": {"tcp": 30.2, "achieved_pct": 86.4, "rtt_ms": 120.27, "sqrt_p": 0.424},
        "cross-p1": {"tcp": 15.65, "cross": 75.3},
        "cross-p5": {"tcp": 45.96, "appropriation_pct": 38.7},
        "cross-p9": {"tcp": 61.33, "appropriation_pct": 58.0},
        "udp1-10-c5": {}, "udp1-10-c9": {}, "udp50-80-c5": {}, "udp50-80-c9": {}, "cross-c5": {}, "cross-c9": {},
        "cross-c9-m100": {"tcp": 18.5, "appropriation_pct": 2.9}}
SCALE = (0.98, 1.0, 1.02)     # trial k's factor on the rates: mean = the table value, std > 0
HIGH = ', "flows.udp.min_mbps" = 50, "flows.udp.max_mbps" = 80'


def _set(s: tuple) -> str:
    if len(s) < 7:
        return f'"flows.tcp.streams" = {s[0]}'
    return f'"flows.tcp.streams" = 1, "flows.frac.streams" = {s[0] - 1}, "flows.frac.cca" = "{s[6]}"'


SOURCE = """[profile]
repeats = 3
[topology]
pairs = 2
bottleneck_rate_mbps = 100
rtt_ms = 60
[probe]
pair = 2
mode = "interval"
interval_ms = 10
[[flows]]
name = "tcp"
role = "foreground"
streams = 1
duration_s = 240
[[flows]]
name = "frac"
role = "foreground"
cca = "lh_frac10"
streams = 4
duration_s = 240
[[flows]]
name = "udp"
role = "background"
tool = "paced-udp"
pattern = "sinusoid"
pair = 2
min_mbps = 1
max_mbps = 10
period_s = 9.8696
duration_s = 240
[[flows]]
name = "cross"
role = "background"
pair = 2
streams = 5
duration_s = 240
""" + "".join(f"""[[scenarios]]
name = "{n}"
set = {{ {_set(s)}{HIGH if s[1] == (50, 80) else ''} }}
""" for n, s in SCENARIOS.items())


def capacity_mb(lo: float, hi: float) -> float:
    """Eq. (8) written out independently, with our source's c = period / 2 pi, in 10^6-byte MB."""
    c, avg = PERIOD / (2 * math.pi), (hi - lo) / 2
    return ((M - I_MBPS) * TAU - avg * (c * math.sin(TAU / c) + TAU * lo / avg + TAU)) / 8


def make_run(tmp_path: Path, *, skip=(), fail=(), no_rtt=(), manifest_cells=True) -> Path:
    run = tmp_path / "20261122-120000-abcdef"
    cells, declared = [], []
    for i, (name, (streams, udp, tcp, cross, loss, rtt, *frac)) in enumerate(SCENARIOS.items()):
        if name in skip:
            continue
        cid = f"{PROFILE}-{i + 1:03d}"
        flows = [_decl("tcp", "foreground", "iperf3", "tcp", 1 if frac else streams, "constant")]
        if frac:
            flows.append({**_decl("frac", "foreground", "iperf3", "tcp", streams - 1, "constant"), "cca": frac[0]})
        flows.append(_decl("udp", "background", "paced-udp", "udp", 1, "sinusoid") if udp else
                     _decl("cross", "background", "iperf3", "tcp", 5, "constant"))
        values = REFS[name]
        trials = [_trial(run / "cells" / cid / f"trial-{k}", k, name, flows, (cid, k) in fail,
                         (cid, k) in no_rtt) for k in (1, 2, 3)]
        cells.append({"id": cid, "profile": PROFILE, "scenario": name, "params": {"scenario": name},
                      "topology": {"pairs": 2, "access_rate_mbps": 1000.0, "bottleneck_rate_mbps": M,
                                   "rtt_ms": 60.0, "queue_bytes": 750000, "mtu": 1500},
                      "labels": {}, "reference": {"source": f"seed 002 Table x, row {streams}", "values": values},
                      "lab": {"ok": True}, "flows": flows, "trials": trials})
        full = [{**f, "duration_s": TAU, "start_s": 0.0} for f in flows]
        if udp:
            full[-1].update(min_mbps=float(udp[0]), max_mbps=float(udp[1]), period_s=PERIOD)
        declared.append({"id": cid, "profile": PROFILE, "scenario": name, "params": {"scenario": name},
                         **({"cell": {"topology": {"bottleneck_rate_mbps": M}, "flows": full,
                                      "probe": {"pair": 2, "mode": "interval", "interval_ms": INTERVAL_MS}}}
                            if manifest_cells else {})})
    _json(run / "manifest.json", {"format": "longhaul-run", "version": 1, "run_id": run.name,
                                  "status": "complete", "cells": declared, "time_scale_override": None,
                                  "profiles": {PROFILE: {"path": f"profiles/{PROFILE}.toml", "source": SOURCE,
                                                         "time_scale": 1.0}}})
    _json(run / "summary.json", {"format": "longhaul-summary", "version": 1, "run_id": run.name,
                                 "status": "complete", "cells": cells})
    return run


def _decl(name, role, tool, protocol, streams, pattern) -> dict:
    return {"name": name, "role": role, "tool": tool, "protocol": protocol, "cca": "reno" if protocol == "tcp"
            else None, "pair": 1 if role == "foreground" else 2, "streams": streams, "pattern": pattern}


def _trial(tdir: Path, k: int, name: str, flows: list[dict], failed: bool, no_rtt: bool) -> dict:
    _, udp, tcp, cross, loss, rtt, *frac = SCENARIOS[name]
    tdir.mkdir(parents=True)
    if failed:
        return {"trial": k, "status": "failed", "error": "iperf3 died", "flows": [], "rtt": None}
    f = SCALE[k - 1]
    t = np.arange(1.0, TAU + 1)
    fg = [(flows[0], COMBINED_SHARE if frac else 1.0)] + ([(flows[1], 1 - COMBINED_SHARE)] if frac else [])
    res = [{**d, "mean_mbps": tcp * f * share, "bytes": tcp * f * share * 1e6 / 8 * TAU, "on_s": TAU,
            "lost_percent": None} for d, share in fg]
    rows = [(x, d["name"], "all", tcp * f * share) for d, share in fg for x in t]
    flows = [flows[0], flows[-1]]
    if udp:
        lo, hi = udp
        rate = (hi - lo) / 2 * np.cos((t - 0.5) * 2 * math.pi / PERIOD) + (hi + lo) / 2
        res.append({**flows[1], "mean_mbps": float(rate.mean()), "bytes": float(rate.mean()) * 30e6,
                    "on_s": TAU, "lost_percent": loss * f})
        rows += [(x, "udp", "all", r) for x, r in zip(t, rate)]
    else:
        res.append({**flows[1], "mean_mbps": cross * (2 - f), "bytes": cross * 30e6, "on_s": TAU,
                    "lost_percent": None})
        rows += [(x, "cross", "all", cross) for x in t]
    _csv(tdir / "throughput.csv", ("t_s", "flow", "stream", "mbps"), rows)
    if not no_rtt:
        # rtt +- 1 ms alternately in the transfer (median exactly rtt), then a slow tail after it
        # that the section must leave out
        ts = np.round(np.arange(0.05, TAU + 10, 0.1), 2)
        vals = [(rtt * f + (1 if i % 2 else -1)) if x <= TAU else 500.0 for i, x in enumerate(ts)]
        _csv(tdir / "rtt.csv", ("t_s", "rtt_ms", "sent", "received", "mode"),
             [(x, v, 1, 1, "interval") for x, v in zip(ts, vals)])
    return {"trial": k, "status": "ok", "error": None, "flows": res, "jain": 0.9,
            "rtt": {"idle_ms": 60.0, "median_ms": 99.9}}


def _csv(path, header, rows) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def _json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _section(run: Path) -> str | None:
    """The section's HTML as the report places it (None: the section does not apply)."""
    return render_section(stiff_udp_section.SECTION, load_store(run))


def _row(html: str, table_start: str, row: str) -> list[str]:
    """The cells of `row` in the first table after the heading containing `table_start`."""
    part = html[html.index(table_start):]
    part = part[:part.index("</table>")]
    m = re.search(rf"<tr><td>{re.escape(row)}</td>(.*?)</tr>", part)
    assert m, f"no row {row} under {table_start}"
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td class='num'>(.*?)</td>", m.group(1))]


@pytest.mark.parametrize("manifest_cells", [True, False], ids=["manifest-cell", "profile-snapshot"])
def test_tables_with_ours_and_paper(tmp_path, manifest_cells):
    html = _section(make_run(tmp_path, manifest_cells=manifest_cells))
    assert html and html.startswith('<section id="stiff-udp">')
    t1, t2 = capacity_mb(1, 10), capacity_mb(50, 80)
    assert abs(t1 - 2832.18) < 0.01 and abs(t2 - 1045.30) < 0.01
    # Table I, Baseline 1: throughput, paper, MB, paper MB, T, achieved, paper achieved, n
    row = _row(html, "TABLE I equivalent", "Baseline 1")
    mbps = [70.0 * f for f in SCALE]
    assert row[0] == f"70.00 ± {np.std(mbps, ddof=1):.2f}" and row[1] == "64.5"
    assert row[2] == f"{70.0 / 8 * TAU:.1f}" and row[3] == "1843.2"
    assert row[4] == f"{t1:.1f}"
    achieved = [m / 8 * TAU / t1 * 100 for m in mbps]
    assert row[5] == f"{np.mean(achieved):.2f} ± {np.std(achieved, ddof=1):.2f}" and row[6] == "65.8"
    assert row[7] == "3"
    row = _row(html, "TABLE II equivalent", "Parallel 9")
    assert row[4] == f"{t2:.1f}" and row[6] == "86.4"
    assert row[5].startswith(f"{np.mean([31.0 * f / 8 * TAU / t2 * 100 for f in SCALE]):.2f} ±")
    # Tables IV/V: median of per-trial medians inside [0, tau] (the 500 ms tail is left out), and
    # sqrt of the median loss percent; the paper's row "Base" of Table V is found.
    row = _row(html, "TABLE IV equivalent", "Parallel 5")
    assert row[0] == "72.00" and row[1] == "73.01"
    assert row[2] == f"{math.sqrt(0.20):.3f}" and row[3] == "0.436"
    assert _row(html, "TABLE V equivalent", "Baseline 1")[1] == "67.92"
    # Table III and appropriation against our own cross-p1 (medians 75.0 and 46.0 for P5)
    row = _row(html, "TABLE III equivalent", "Parallel 5")
    assert row[0].startswith("46.00 ±") and row[1] == "45.96"
    assert row[4] == "46.00" and row[5] == "≈46.16"
    assert row[6] == f"{(75 - 46) / 75 * 100:.1f}" and row[7] == "38.7" and row[8] == "40.0"
    row = _row(html, "TABLE III equivalent", "Baseline 1")
    assert row[4] == "75.00" and row[5] == "75.3" and row[6] == "(baseline)"
    assert _row(html, "TABLE III equivalent", "Parallel 9")[7] == "58"
    assert "I = 0.067 Mb/s" in html and "4.9 %" in html and "<svg" in html
    assert '<ul class="missing">' not in html          # nothing missing in a complete run


def test_combined_rows_sum_the_unmodified_and_fractional_streams(tmp_path):
    html = _section(make_run(tmp_path))
    row = _row(html, "TABLE I equivalent", "Combined 5")      # 1 Reno + 4 lh_frac10: their sum
    assert row[0].startswith("83.00 ±") and row[1] == "83.54" and row[6] == "85.75"
    assert _row(html, "TABLE II equivalent", "Combined 9")[1] == "27.3"
    row = _row(html, "TABLE IV equivalent", "Combined 9")
    assert row[0] == "99.00" and row[1] == "100.51" and row[2] == f"{math.sqrt(0.12):.3f}" and row[3] == "0.332"
    assert _row(html, "TABLE V equivalent", "Combined 5")[1] == "68.06"
    row = _row(html, "TABLE III equivalent", "Combined 9")
    # appropriation against cross-p1's 75: no N/(N+k) prediction for fractional streams
    assert row[0].startswith("30.00 ±") and row[1] == "29.84" and row[6] == f"{(75 - 62) / 75 * 100:.1f}"
    assert row[7] == "17.5" and row[8] == "–"
    row = _row(html, "TABLE III equivalent", "Combined 9 (multiplier 100)")   # section VII.D
    assert row[0].startswith("18.50 ±") and row[1] == "18.5" and row[7] == "2.9"
    part = html[html.index("TABLE I equivalent"):]
    order = [part.index(f"<td>{n}</td>") for n in ("Baseline 1", "Combined 5", "Combined 9", "Parallel 5")]
    assert order == sorted(order)                             # the paper's row order


def test_the_method_of_a_cell_s_foreground_flows():
    reno = {"name": "tcp", "cca": "reno", "streams": 1}
    assert stiff_udp_cases.method([reno]) == (1, "Baseline 1")
    assert stiff_udp_cases.method([{**reno, "streams": 5}]) == (5, "Parallel 5")
    frac = {"name": "frac", "cca": "lh_frac10", "streams": 8}
    assert stiff_udp_cases.method([reno, frac]) == (9, "Combined 9")
    assert stiff_udp_cases.method([reno, {**frac, "cca": "lh_frac100"}]) == (9, "Combined 9 (multiplier 100)")
    assert stiff_udp_cases.method([{**reno, "streams": 2}, frac]) == (10, "Combined 10 (2 unmodified)")
    assert stiff_udp_cases.method([{**reno, "buffer": 356000}]) == (1, "Baseline 1 (buffer 356000 B)")
    # H-TCP in BPF is no fractional stream
    assert stiff_udp_cases.method([reno, {**frac, "cca": "lh_htcp"}]) == (9, "Parallel 9")


def test_missing_cells_and_trials_degrade(tmp_path):
    run = make_run(tmp_path, skip=("udp50-80-p5", "cross-p1"), fail={(f"{PROFILE}-001", 2)},
                   no_rtt={(f"{PROFILE}-002", 1)})
    html = _section(run)
    row = _row(html, "TABLE II equivalent", "Parallel 5")
    assert row[0] == "–" and row[1] == "27.6" and row[7] == "0"
    assert "No Parallel 5 cell (UDP 50-80) in this run: its row shows" in html
    row = _row(html, "TABLE I equivalent", "Baseline 1")
    two = [70 * .98, 70 * 1.02]                          # trial 2 failed: trials 1 and 3 only
    assert row[7] == "2" and row[0] == f"{np.mean(two):.2f} ± {np.std(two, ddof=1):.2f}"
    assert "1 of 3 trials" not in html and "2 of 3 trials ok" in html
    assert _row(html, "TABLE IV equivalent", "Parallel 5")[0] == f"{np.median([99.9, 72.0, 72 * 1.02]):.2f}"
    assert "rtt.csv missing in 1 trial" in html
    assert _row(html, "TABLE III equivalent", "Parallel 5")[6] == "–"
    assert "No Baseline 1 cross-traffic cell" in html


def test_only_one_range_and_no_cross(tmp_path):
    run = make_run(tmp_path, skip=tuple(n for n in SCENARIOS if not n.startswith("udp1-10")))
    html = _section(run)
    assert "TABLE I equivalent" in html and "TABLE II equivalent" not in html
    assert "UDP 50-80 Mb/s in this run: TABLE II is not reproduced" in html
    assert "Table III and the appropriation" in html


def test_no_seed002_cells_gives_none(tmp_path):
    assert _section(report_fixtures.make_store(tmp_path)) is None


def test_broken_store_is_a_note_not_an_exception(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    monkeypatch.setattr(stiff_udp_section, "_effectiveness", lambda *a: 1 / 0)
    html = _section(run)
    assert "The seed 002 analysis failed" in html


def test_whole_report_renders_with_the_section(tmp_path):
    page = render.render_html(make_run(tmp_path), sections=registry.SECTIONS)
    assert 'id="stiff-udp"' in page and "TABLE III equivalent" in page
    assert page.index('id="stiff-udp"') < page.index('<section id="notes">')


def test_one_trial_shows_no_spread(tmp_path):
    run = make_run(tmp_path, fail={(f"{PROFILE}-001", 2), (f"{PROFILE}-001", 3)})
    row = _row(_section(run), "TABLE I equivalent", "Baseline 1")
    assert row[0] == f"{70.0 * SCALE[0]:.2f}" and "±" not in row[5] and row[7] == "1"


def test_stored_markup_is_escaped(tmp_path):
    # a cell id reaches the notes; a failing trial and a missing range make sure there are some
    run = make_run(tmp_path, skip=("udp50-80-p5",), fail={(f"{PROFILE}-001", 2)})
    evil = "<script>x"                      # no "/": the id is also a directory name
    old = f"{PROFILE}-001"
    (run / "cells" / old).rename(run / "cells" / f"{evil}-001")
    for name in ("summary.json", "manifest.json"):
        (run / name).write_text((run / name).read_text().replace(f'"{old}"', f'"{evil}-001"'))
    html = _section(run)
    assert "<script>" not in html and "Cell &lt;script&gt;x-001: 2 of 3 trials ok" in html


def test_cells_over_paths_of_several_rtts_are_rows_of_their_own(tmp_path):
    run = make_run(tmp_path, skip=tuple(n for n in SCENARIOS if n not in ("udp1-10-p1", "udp1-10-p5")))
    summary = json.loads((run / "summary.json").read_text())
    summary["cells"][1]["topology"]["rtt_ms"] = 68.0
    (run / "summary.json").write_text(json.dumps(summary))
    html = _section(run)
    assert _row(html, "TABLE I equivalent", "Baseline 1 at 60 ms")[1] == "64.5"        # the cell's reference
    assert _row(html, "TABLE I equivalent", "Parallel 5 at 68 ms")[1] == "84.5"
