"""A sweep's report: past MAX_CELL_SECTIONS cells the page maps the sweep (heat maps over its axes)
and every cell gets a page of its own beside it, none left out; small runs stay as they were."""
from __future__ import annotations

import re

import pytest
from sweep_fixtures import make_sweep_store

from longhaul.collectors.store.reader import load_store
from longhaul.reports import render
from longhaul.reports.cell_pages import CELL_PAGES
from longhaul.reports.sweep import sweep_axes

AXES = {"flows.fg.cca": ("cubic", "htcp"), "flows.fg.streams": (1, 2, 4, 8, 16),
        "topology.rtt_ms": (0.4, 11.8, 45.6, 183.0, 366.0)}          # 50 cells > 40


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    return make_sweep_store(tmp_path_factory.mktemp("sweep"), AXES, trials=2, seconds=8)


@pytest.fixture(scope="module")
def written(sweep_run):
    return render.write_report(sweep_run, ("html",))


def test_the_axes_are_the_parameters_that_vary_most_first(sweep_run):
    axes = sweep_axes(load_store(sweep_run).entries)
    assert [(a.key, a.values) for a in axes] == [("flows.fg.streams", (1, 2, 4, 8, 16)),
                                                 ("topology.rtt_ms", (0.4, 11.8, 45.6, 183.0, 366.0)),
                                                 ("flows.fg.cca", ("cubic", "htcp"))]


def test_a_sweep_report_maps_the_sweep_and_links_a_page_for_every_cell(sweep_run, written):
    html = (sweep_run / "report.html").read_text()
    assert written == [sweep_run / "report.html", sweep_run / CELL_PAGES]
    assert 'id="sweep"' in html and html.count("<svg") == 2          # throughput and RTT inflation maps
    assert "cca=cubic" in html and "cca=htcp" in html                 # one panel per CCA
    assert 'class="cell"' not in html and "has a page of its own" in html
    cells = [c.id for c in load_store(sweep_run).entries]
    linked = set(re.findall(rf'href="{CELL_PAGES}/([^"]+)\.html"', html))
    assert linked == set(cells) and len(cells) == 50
    for cell in cells:
        page = (sweep_run / CELL_PAGES / f"{cell}.html").read_text()
        assert page.count("<svg") == 1 and 'href="../report.html"' in page and f"Cell <span class=\"mono\">{cell}" in page
    assert not (sweep_run / f"{CELL_PAGES}.partial").exists()


def test_a_cell_page_draws_every_trial_of_its_cell(sweep_run, written):
    page = (sweep_run / CELL_PAGES / "seed001-007.html").read_text()
    assert "trial 1" in page and "trial 2" in page and "idle RTT" in page
    assert "#1 ok" in page and "#2 ok" in page


def test_a_sweep_lists_only_the_cells_whose_lab_did_not_verify(sweep_run, written):
    html = (sweep_run / "report.html").read_text()
    assert "50 of 50 cells verified within tolerance." in html
    assert html.count('<section id="verification">') == 1 and "RTT (ms)" not in html.split('<section id="results">')[0]


def test_a_sweep_s_pdf_keeps_the_overview_and_leaves_the_cells_to_the_html(sweep_run, written):
    import shutil
    import subprocess

    (pdf,) = render.write_report(sweep_run, ("pdf",))
    assert not (sweep_run / f"{CELL_PAGES}.partial").exists()
    if shutil.which("pdftotext"):
        text = " ".join(subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout.split())
        assert "listed cell by cell in the HTML report's table" in text and "seed001-007" not in text
        assert "The sweep at a glance" in text
