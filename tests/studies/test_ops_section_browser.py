"""The OPS section as a person sees it: the report of an `ops evaluate --out RUN_DIR` opened in
headless chromium. Its accuracy tables carry twelve window lengths; they must stay inside the text
column the PDF prints (the body's 190 mm), not run off the page. LONGHAUL_SCREENSHOTS=DIR keeps a
screenshot of the tables."""
from __future__ import annotations

import os
from pathlib import Path

import ops_synthetic
import pytest
from browser_support import MISSING, chromium

from longhaul.appliance.cli.app import main
from longhaul.collectors.studies.ops.classify import DEFAULT_WS

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
SHOTS = os.environ.get("LONGHAUL_SCREENSHOTS")


def test_the_accuracy_tables_of_every_w_fit_the_text_column(tmp_path, capsys):
    data = ops_synthetic.write(tmp_path / "syn.csv", minutes=6, seed=5)
    run = tmp_path / "run"
    assert main(["ops", "evaluate", str(data), "--classifiers", "knn,gnb", "--json", "--out", str(run)]) == 0
    capsys.readouterr()
    with chromium() as browser:
        browser.get((run / "report.html").as_uri())
        body, tables = browser.execute_script(
            "return [document.body.getBoundingClientRect().width, [...document.querySelectorAll('table.accuracy')]"
            ".map(t => [t.querySelectorAll('thead th').length, t.getBoundingClientRect().width])]")
        if SHOTS:
            browser.execute_script("document.querySelector('table.accuracy').scrollIntoView()")
            browser.save_screenshot(str(Path(SHOTS) / "report-ops-accuracy-table.png"))
    assert len(tables) == 4          # class and decision accuracy, passive and active
    for columns, width in tables:
        assert columns == 1 + len(DEFAULT_WS)
        assert width <= body + 0.5, (width, body)
