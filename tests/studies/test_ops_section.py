"""The report's OPS section, rendered through its template from ops/evaluation.json and
ops/fig29.json of a run directory."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import ops_synthetic
import pytest
import report_fixtures

from longhaul.collectors.studies import registry
from longhaul.collectors.studies.ops import classify as ops_classify
from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.collectors.studies.ops import lab_runs
from longhaul.collectors.studies.ops.section import SECTION
from longhaul.reports import render
from longhaul.reports.render import render_section

SVG_NS = "{http://www.w3.org/2000/svg}"
VOID = {"br", "hr", "img", "input", "meta", "link", "col", "wbr", "source"}
FIG29 = {**lab_runs.FIG29.stamp(), "schemes": [
    {"background": "cubic", "scheme": "Fixed:CUBIC", "fg_mbps": 231.0, "bg_mbps": 238.0, "jain": 0.99,
     "paper": {"fg_mbps": None, "bg_mbps": None, "jain": None}},
    {"background": "cubic", "scheme": "Fixed:BBR", "fg_mbps": 402.0, "bg_mbps": 61.0, "jain": 0.64,
     "paper": {"fg_mbps": None, "bg_mbps": None, "jain": 0.62}},
    {"background": "cubic", "scheme": "Adaptive", "fg_mbps": 220.0, "bg_mbps": 249.0, "jain": 0.99,
     "paper": {"fg_mbps": None, "bg_mbps": None, "jain": 0.99}},
    {"background": "bbr", "scheme": "Fixed:CUBIC", "fg_mbps": 52.0, "bg_mbps": 418.0, "jain": 0.62},
    {"background": "bbr", "scheme": "Fixed:BBR", "fg_mbps": 229.0, "bg_mbps": 236.0, "jain": 1.0,
     "paper": {"fg_mbps": None, "bg_mbps": None, "jain": None}},
    {"background": "bbr", "scheme": "Adaptive", "fg_mbps": 201.0, "bg_mbps": 262.0, "jain": 0.98,
     "paper": {"fg_mbps": 200.0, "bg_mbps": 250.0, "jain": 0.96}},
]}


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    path = ops_synthetic.write(tmp_path_factory.mktemp("ops") / "syn.csv", minutes=3, seed=9)
    return ops_classify.evaluate(ops_dataset.load(path), ws=[10, 20], classifiers=["knn", "gnb"])


def _run_dir(tmp_path, evaluation=None, fig29=None) -> Path:
    ops = tmp_path / "ops"
    ops.mkdir(parents=True)
    if evaluation is not None:
        (ops / "evaluation.json").write_text(json.dumps(evaluation))
    if fig29 is not None:
        (ops / "fig29.json").write_text(json.dumps(fig29))
    return tmp_path


def _section(run_dir: Path) -> str | None:
    """The section's HTML as the report places it (None: the section does not apply)."""
    return render_section(SECTION, SimpleNamespace(run_dir=run_dir, manifest={}, summary={}))


class _Balance(HTMLParser):
    """Fails on a closing tag that does not match the open one; records the open stack."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1:]}>"
        self.stack.pop()


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg.*?</svg>", html, re.S)]


def _titles(svg: ET.Element) -> tuple[str, list[str]]:
    title = svg.find(f"{SVG_NS}title")
    texts = ["".join(t.itertext()) for t in svg.iter(f"{SVG_NS}text")]
    return (title.text if title is not None else ""), texts


def test_nothing_to_show(tmp_path):
    assert _section(tmp_path) is None
    (tmp_path / "ops").mkdir()
    assert _section(tmp_path) is None


def test_full_section_parses_and_every_svg_has_a_title(tmp_path, evaluation):
    html = _section(_run_dir(tmp_path, evaluation, FIG29))
    parser = _Balance()
    parser.feed(html)
    parser.close()
    assert parser.stack == []
    assert html.startswith('<section id="ops">')
    svgs = _svgs(html)
    # per probing: accuracy vs w, box per classifier, box per w; confusion grid; Figure 29
    assert len(svgs) == 2 * 3 + 1 + 1
    for svg in svgs:
        title, texts = _titles(svg)
        assert title.startswith("OPS: ")
        assert any(title == t for t in texts), title  # the title is also drawn on the figure
        assert any(t == "accuracy (%)" or "(Mb/s)" in t or "(windows)" in t for t in texts)  # units
    drawn = [t for svg in svgs for t in _titles(svg)[1]]
    for name in ("1-NN (DTW)", "3-NN (DTW)", "5-NN (DTW)", "GNB", "FG (ours)", "correct (diagonal)"):
        assert name in drawn  # legends


def test_section_content(tmp_path, evaluation):
    html = _section(_run_dir(tmp_path, evaluation, FIG29))
    assert "passive probing" in html and "active probing" in html
    assert "Figure 26" in html and "Figures 27b and 28b" in html and "Figures 27a (active) and 23a" in html
    assert "windows a panel" in html and "left only the number of streams" in html
    for cls in ops_dataset.CLASSES:
        assert f'class="mono">{cls}</th>' in html  # per-class precision/recall/F1 rows
    # Jain: ours and the paper's from the text, filled in when fig29.json leaves them out
    assert "(paper 0.62)" in html and "(paper 0.60)" in html and "(paper 0.96)" in html
    assert "(paper 0.99)" in html


def test_decision_accuracy_table(tmp_path, evaluation):
    html = _section(_run_dir(tmp_path, evaluation))
    assert "Decision accuracy: windows whose predicted class leads to the same congestion control" in html
    assert "none, cubic, cubic2 -&gt; cubic; bbr, bbr2, cubic_bbr -&gt; bbr" in html
    r = evaluation["results"][0]
    assert r["decision_accuracy_mean"] >= r["accuracy_mean"]      # a right class is always a right decision


def test_recognition_beside_the_paper(tmp_path, evaluation):
    html = _section(_run_dir(tmp_path, evaluation))
    table = re.search(r"<caption>Recognition: ours beside the paper.*?</table>", html, re.S).group(0)
    best = max((r for r in evaluation["results"] if r["probing"] == "active"), key=lambda r: r["accuracy_mean"])
    assert f"{100 * best['accuracy_mean']:.1f} ({best['label']}, w = {best['w']})" in table
    assert "up to 85 (1-NN)" in table and "up to 96 (1-NN, w = 50)" in table
    # the evaluation has no w = 5 or 50: our gaps are dashes beside the paper's +7 and +16
    assert re.search(r"w = 5</th><td class=\"num\">–</td><td[^>]*>\+7<", table)
    assert re.search(r"w = 50</th><td class=\"num\">–</td><td[^>]*>\+16<", table)


def test_only_fig29(tmp_path):
    html = _section(_run_dir(tmp_path, fig29=FIG29))
    assert "Figure 29" in html and "Background recognition" not in html
    assert len(_svgs(html)) == 1


def test_broken_files_become_notes(tmp_path):
    run_dir = _run_dir(tmp_path, fig29={**lab_runs.FIG29.stamp(), "schemes": []})
    (run_dir / "ops" / "evaluation.json").write_text("{not json")
    html = _section(run_dir)
    assert "evaluation.json is unreadable" in html and "fig29.json has no schemes" in html


def test_foreign_evaluation_format(tmp_path):
    html = _section(_run_dir(tmp_path, {"format": "something-else", "results": []}))
    assert "not shown" in html


def test_a_figure_29_file_of_a_newer_version_is_a_note(tmp_path):
    html = _section(_run_dir(tmp_path, fig29={**FIG29, "version": 9}))
    assert "fig29.json: longhaul-ops-fig29 version 9 is not supported" in html and "not shown" in html


def test_inlined_in_the_report(tmp_path, evaluation):
    run_dir = report_fixtures.make_store(tmp_path)
    _run_dir(run_dir, evaluation, FIG29)
    html = render.render_html(run_dir, sections=registry.SECTIONS)
    assert '<section id="ops">' in html
    assert html.index('<section id="ops">') < html.index('<section id="notes">')


def test_fig29_cycles_table(tmp_path):
    cycles = [{"t_s": 10.0, "class": "bbr", "ops_cca": "bbr", "cca": "bbr", "probe_ms": 151.2, "mbps": 174.0},
              {"t_s": 52.0, "class": "none", "ops_cca": "cubic", "cca": "cubic", "probe_ms": 129.6, "mbps": 27.0}]
    fig29 = {**lab_runs.FIG29.stamp(), "schemes": [dict(FIG29["schemes"][5], decisions=cycles, right_cca="bbr", ops_right=0.5),
                         FIG29["schemes"][4]]}
    html = _section(_run_dir(tmp_path, fig29=fig29))
    table = re.search(r"<caption>Figure 29 cycles.*?</table>", html, re.S).group(0)
    assert "bbr (151 ms) -> bbr 174; none (130 ms) -> cubic 27" in table
    assert ">50.0<" in table and table.count("<tr>") == 2        # header and the one scheme with cycles


def test_stored_markup_is_escaped(tmp_path, evaluation):
    evil = "<script>alert(1)</script>"
    doc = json.loads(json.dumps(evaluation))
    doc["dataset"]["name"] = evil
    doc["results"][0]["label"] = evil
    fig29 = {"schemes": [dict(FIG29["schemes"][0], scheme=evil,
                              decisions=[{"class": evil, "cca": "bbr", "probe_ms": 150.0, "mbps": 90.0}])]}
    html = _section(_run_dir(tmp_path, doc, fig29))
    assert "<script>" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4   # setup, tables, Figure 29, cycles


def test_accuracy_tables_give_the_standard_error_and_the_windows_tested(tmp_path, evaluation):
    doc = json.loads(json.dumps(evaluation))
    row = next(r for r in doc["results"] if r["probing"] == "passive" and r["w"] == 10 and r.get("k") == 1)
    html = _section(_run_dir(tmp_path, doc))
    table = re.search(r"<caption>Accuracy \(%\), mean over the folds, ± its binomial standard error over the "
                      r"windows tested.*?passive probing</caption>.*?</table>", html, re.S).group(0)
    cells = re.search(rf"<th scope=\"row\">{re.escape(row['label'])}</th>(.*?)</tr>", table).group(1)
    first = re.findall(r"<td class=\"num\">(.*?)</td>", cells)[0]      # w = 10
    p, n = row["accuracy_mean"], row["n_windows"]
    assert first == f"{100 * p:.1f}<span class=\"n\"> ±{100 * (p * (1 - p) / n) ** 0.5:.1f}</span>"
    counts = re.search(r"<th scope=\"row\">windows tested</th>(.*?)</tr>", table).group(1)
    tested = {r["w"]: r["n_windows"] for r in doc["results"] if r["probing"] == "passive"}
    assert re.findall(r"<td class=\"num\">(\d+)</td>", counts) == [str(tested[10]), str(tested[20])]


def test_held_out_tables_say_so(tmp_path, evaluation):
    doc = json.loads(json.dumps(evaluation))
    doc["settings"]["mode"] = "held-out"
    html = _section(_run_dir(tmp_path, doc))
    assert "<caption>Accuracy (%), on the held-out recording, ± its binomial" in html
    assert "mean over the folds" not in html


def test_both_ways_tables_and_setup_say_so(tmp_path, evaluation):
    doc = json.loads(json.dumps(evaluation))
    doc["settings"].update(mode="held-out both ways", folds=2, test_dataset={"name": "later", "minutes": {}})
    html = _section(_run_dir(tmp_path, doc))
    assert "<caption>Accuracy (%), on both recordings, each tested by a model trained on the other, ±" in html
    assert "and the other way round" in html and "mean over the folds" not in html


def test_paper_statements_are_marked_on_the_accuracy_plots(tmp_path, evaluation):
    html = _section(_run_dir(tmp_path, evaluation))
    drawn = [t for svg in _svgs(html) for t in _titles(svg)[1]]
    assert "1-NN 80-85 %" in drawn and "96 % at w = 50" in drawn


