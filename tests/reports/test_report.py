"""The report renders every section, plot and the Table 2 layout from a store, complete or partial;
studies' sections come in through the Section contract (reports/sections.py)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import report_fixtures

from longhaul.collectors.store.reader import StoreVersionError
from longhaul.collectors.studies import registry
from longhaul.reports.fmt import fmt_mbps
from longhaul.reports.render import render_html, write_report
from longhaul.reports.sections import Section, figure

make_store = report_fixtures.make_store
SECTIONS = {"header", "verification", "results", "fairness", "plots", "notes"}
N_CELLS = 3
N_SVG = 1 + 5 * N_CELLS  # the bar chart, then throughput, RTT, bytes in flight, sRTT and retransmissions per cell
SVG_NS = "{http://www.w3.org/2000/svg}"


class _Page(HTMLParser):
    """Section ids, <svg> count, and every table as rows of cell texts, keyed by its class."""

    def __init__(self):
        super().__init__()
        self.ids, self.svg_count, self.tables = set(), 0, {}
        self._table, self._cell = None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section" and attrs.get("id"):
            self.ids.add(attrs["id"])
        elif tag == "svg":
            self.svg_count += 1
        elif tag == "table":
            self._table = self.tables.setdefault(attrs.get("class") or "", [])
            self._table.clear()
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    run_dir = make_store(tmp_path_factory.mktemp("full"))
    paths = write_report(run_dir)
    return run_dir, paths


@pytest.fixture(scope="module")
def partial_report(tmp_path_factory):
    run_dir = make_store(tmp_path_factory.mktemp("partial"), partial=True)
    paths = write_report(run_dir)
    return run_dir, paths


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def test_write_report_returns_both_files(full_report):
    run_dir, paths = full_report
    assert paths == [run_dir / "report.html", run_dir / "report.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_html_has_every_section_and_plot(full_report):
    run_dir, _ = full_report
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    page = _parse(html)
    assert SECTIONS <= page.ids
    assert page.svg_count == N_SVG
    assert "20240611-101500-a1b2c3" in html and "6.1.0-21-amd64" in html and "3f2a9c1d8e7b" in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html), "the report must not load anything remote"


def test_every_svg_parses_and_has_title_labels_legend(full_report):
    run_dir, _ = full_report
    svgs = re.findall(r"<svg.*?</svg>", (run_dir / "report.html").read_text(encoding="utf-8"), re.S)
    assert len(svgs) == N_SVG
    titles = []
    for svg in svgs:
        root = ET.fromstring(svg)
        texts = [t.text or "" for t in root.iter(f"{SVG_NS}text")]
        titles.append(next(t for t in texts if ":" in t or t.startswith("Mean throughput")))
        assert any(u in t for t in texts for u in ("(Mb/s)", "(ms)", "(MB)", "(segments/s)")), texts  # y unit
        assert any(t.endswith(("(s)", "cell")) for t in texts), texts  # x label
        assert any("legend" in (g.get("id") or "") for g in root.iter(f"{SVG_NS}g")), "no legend"
    for cell in ("table2-000", "table2-001", "table2-002"):
        for kind in ("Throughput over time", "RTT over time", "Bytes in flight (tcp_info)",
                     "sRTT per flow (tcp_info)", "Retransmissions per flow (tcp_info)"):
            assert f"{kind}: {cell}" in titles
    assert any(t.startswith("Mean throughput per cell and flow") for t in titles)
    ids = re.findall(r'\sid="([^"]+)"', "".join(svgs))
    assert len(ids) == len(set(ids)), "inline SVGs share one id namespace: ids must be unique"


def test_fairness_table_has_table2_layout_with_ours_and_paper(full_report):
    run_dir, _ = full_report
    page = _parse((run_dir / "report.html").read_text(encoding="utf-8"))
    rows = page.tables["data fairness"]
    assert rows[0] == ["Type", "Stream", "no_bg", "bg_iperf", "bg_udt"]
    labels = [r[:2] if r[0] in ("Dedicated", "Shared") else r[:1] for r in rows[1:]]
    assert labels == [["Dedicated", "Background"], ["Foreground (iperf)"],
                      ["Shared", "Background"], ["Foreground (iperf)"], ["Jain fairness"]]
    stats = {c["id"]: c["stats"] for c in json.loads((run_dir / "summary.json").read_text())["cells"]}
    shared_fg = rows[4][2]  # Shared / Foreground (iperf), bg_iperf
    assert shared_fg.startswith(fmt_mbps(stats["table2-001"]["flows"]["fg"]["mean_mbps"]))
    assert "paper 253" in shared_fg
    assert "paper 398" in rows[3][4]  # Shared / Background, bg_udt
    assert "paper 474" in rows[2][1]  # Dedicated / Foreground (iperf), no_bg
    assert f"{stats['table2-002']['jain']['mean']:.2f}" in rows[5][3] and "paper 0.70" in rows[5][3]
    assert rows[1][2] == "–"  # Dedicated / Background, no_bg: nothing measured


def test_pdf_renders_a_page(full_report, tmp_path):
    run_dir, _ = full_report
    pdf = run_dir / "report.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    if shutil.which("pdftoppm") is None:
        pytest.skip("pdftoppm (poppler-utils) is not installed")
    subprocess.run(["pdftoppm", "-png", "-r", "40", "-f", "1", "-l", "1", str(pdf),
                    str(tmp_path / "page")], check=True, timeout=60)
    pngs = list(tmp_path.glob("page*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 0


def test_partial_store_renders_and_lists_failures(partial_report):
    run_dir, paths = partial_report
    assert [p.name for p in paths] == ["report.html", "report.pdf"]
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    page = _parse(html)
    assert SECTIONS <= page.ids
    notes = html[html.index('id="notes"'):]
    assert "interrupted" in notes
    assert "table2-001 trial 2: failed" in notes and "unable to connect to server" in notes
    assert "table2-002 trial 2: interrupted" in notes and "rtt.csv is missing" in notes
    assert "table2-003: no trials were run" in notes
    fairness = page.tables["data fairness"]
    assert fairness[0][-1] == "bg_gftp16" and "no data" in fairness[3][-1]
    assert "paper 415" in fairness[3][-1]


def test_missing_summary_is_rebuilt_from_trial_files(tmp_path):
    run_dir = make_store(tmp_path, partial=True)
    (run_dir / "summary.json").unlink()
    (run_dir / "cells/table2-000/trial-1/throughput.csv").unlink()
    html = render_html(run_dir)
    assert "rebuilt from the per-trial trial.json files" in html
    assert "table2-000 trial 1: trial-1/throughput.csv is missing" in html


@pytest.mark.parametrize("name", ["summary.json", "manifest.json"])
def test_unknown_version_raises_clear_error(tmp_path, name):
    run_dir = make_store(tmp_path)
    doc = json.loads((run_dir / name).read_text())
    doc["version"] = 2
    (run_dir / name).write_text(json.dumps(doc))
    with pytest.raises(StoreVersionError, match=r"version 2 is not supported.*reads version 1"):
        write_report(run_dir, formats=("html",))
    assert not (run_dir / "report.html").exists()


def test_wrong_format_and_unknown_output_format_raise(tmp_path):
    run_dir = make_store(tmp_path)
    with pytest.raises(ValueError, match="unknown report format"):
        write_report(run_dir, formats=("docx",))
    (run_dir / "summary.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(StoreVersionError, match="not a longhaul run store"):
        write_report(run_dir)


def test_missing_manifest_and_garbage_csv_do_not_crash(tmp_path):
    run_dir = make_store(tmp_path)
    (run_dir / "manifest.json").unlink()
    (run_dir / "cells/table2-001/trial-1/tcpinfo.csv").write_bytes(b"\xff\xfe garbage\x00,,\n1,2")
    (run_dir / "cells/table2-001/trial-2/rtt.csv").write_text("t_s,rtt_ms,sent,received,mode\n1.0,")
    html = render_html(run_dir)
    assert "manifest.json is missing" in html
    assert "tcpinfo.csv is unreadable" in html
    assert _parse(html).svg_count == N_SVG  # other trials still provide every plot


def test_empty_directory_is_not_a_store(tmp_path):
    from longhaul.collectors.store.reader import StoreError

    with pytest.raises(StoreError, match="not a run directory"):
        write_report(tmp_path)


# ---- a standard deviation needs two trials ---------------------------------------------------------

def test_one_trial_shows_its_mean_without_spread(partial_report):
    run_dir, _ = partial_report
    page = _parse((run_dir / "report.html").read_text(encoding="utf-8"))
    results = {r[0]: r for r in page.tables["data"][2:]}         # after the two header rows
    one, two = results["table2-002"], results["table2-001"]      # 1 and 2 ok trials (partial store)
    assert re.fullmatch(r"fg: [\d.]+ \(n=1\) ?bg: [\d.]+ \(n=1\)", one[3]), one[3]
    assert re.fullmatch(r"fg: [\d.]+ ± [\d.]+ \(n=2\) ?bg: [\d.]+ ± [\d.]+ \(n=2\)", two[3]), two[3]
    assert "±" not in one[4] and "±" in two[4]                   # Jain
    fairness = page.tables["data fairness"]
    assert "±" not in fairness[4][3] and "(n=1)" in fairness[4][3]   # Shared / Foreground, bg_udt
    assert "±" in fairness[4][2]                                     # Shared / Foreground, bg_iperf


# ---- escaping -------------------------------------------------------------------------------------

def test_stored_markup_is_escaped_in_the_core_report(tmp_path):
    run_dir = make_store(tmp_path, partial=True)
    evil = "<script>alert(1)</script>"
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["cells"][0]["scenario"] = evil
    summary["cells"][1]["trials"][1]["error"] = evil           # the failed trial: a note
    summary["cells"][1]["flows"][0]["tool"] = evil             # the cell page's flow list
    (run_dir / "summary.json").write_text(json.dumps(summary))
    html = render_html(run_dir)
    assert "<script>" not in html
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    for start, end in (('id="results"', 'id="fairness"'), ('id="plots"', 'id="notes"'),
                       ('id="notes"', "</body>")):
        part = html[html.index(start):html.index(end)]
        assert escaped in part, start


# ---- the Section contract ---------------------------------------------------------------------------

class _Stub:
    """A minimal study section: a template in tmp_path and a context given at construction."""

    def __init__(self, folder: Path, name: str, source: str, context=None, applies=True):
        self.name, self.template = name, folder / f"{name}.html.j2"
        self.template.write_text(source)
        self._context, self._applies = context or {}, applies

    def applies(self, store) -> bool:
        return self._applies

    def context(self, store) -> dict:
        if isinstance(self._context, Exception):
            raise self._context
        return self._context


def test_sections_render_in_order_escaped_with_figures(tmp_path):
    run_dir = make_store(tmp_path / "run")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    # the same file name in two folders: each section finds its own (PrefixLoader by name)
    first = _Stub(tmp_path / "a", "first", '{% import "macros.html.j2" as m %}<section id="first">'
                  '<p>{{ text }}</p>{{ m.figure(fig) }}</section>',
                  {"text": "<b>bold</b>", "fig": figure('<svg id="x"></svg>', "a <caption>")})
    second = _Stub(tmp_path / "b", "second", '<section id="second">{{ rows.values | join(",") }}</section>',
                   {"rows": {"values": [1, 2]}})
    skipped = _Stub(tmp_path / "b", "skipped", "<section id=\"skipped\"></section>", applies=False)
    assert all(isinstance(s, Section) for s in (first, second, skipped))
    html = render_html(run_dir, [first, second, skipped])
    assert html.index('<section id="first">') < html.index('<section id="second">') < html.index('id="notes"')
    assert "<p>&lt;b&gt;bold&lt;/b&gt;</p>" in html
    assert '<figure><svg id="x"></svg><figcaption>a &lt;caption&gt;</figcaption></figure>' in html
    assert '<section id="second">1,2</section>' in html          # a key named like a dict method
    assert 'id="skipped"' not in html


def test_a_failing_section_becomes_a_note(tmp_path):
    run_dir = make_store(tmp_path / "run")
    (tmp_path / "s").mkdir()
    broken = _Stub(tmp_path / "s", "broken", "<p>{{ missing }}</p>")         # StrictUndefined
    raising = _Stub(tmp_path / "s", "raising", "<p></p>", RuntimeError("no <data>"))
    html = render_html(run_dir, [broken, raising])
    notes = html[html.index('id="notes"'):]
    assert "The broken section could not be rendered: &#39;missing&#39; is undefined" in notes
    assert "The raising section could not be rendered: no &lt;data&gt;" in notes
    assert 'id="results"' in html                                 # the rest of the report is there


def test_the_studies_sections_in_report_order():
    assert [s.name for s in registry.SECTIONS] == ["regression", "throughput-profile", "ops", "stiff-udp"]
    for s in registry.SECTIONS:
        assert isinstance(s, Section) and s.template.is_file()
        assert s.template.parent.name == s.name.replace("-", "_")   # beside the study's code


def test_markup_is_trusted_in_one_place_only():
    """Autoescape is bypassed only by reports.sections.figure (an SVG from matplotlib) and the
    stylesheet of each page (the run's report, the facility plan): no HTML is assembled in Python
    strings and marked safe anywhere else."""
    root = Path(__file__).parents[2]
    code = [p for d in ("reports", "collectors", "appliance") for p in (root / d).rglob("*.py")]
    marked = [p.relative_to(root) for p in code if "Markup(" in p.read_text(encoding="utf-8")]
    assert marked == [Path("reports/sections.py")]
    templates = [p for d in ("reports", "collectors", "appliance") for p in (root / d).rglob("*.j2")]
    safe = [(p.name, line.strip()) for p in templates for line in p.read_text(encoding="utf-8").splitlines()
            if re.search(r"\|\s*safe\b", line)]
    assert sorted(safe) == [("cell_page.html.j2", "{{ css | safe }}"), ("plan.html.j2", "{{ css | safe }}"),
                            ("report.html.j2", "{{ css | safe }}")]
