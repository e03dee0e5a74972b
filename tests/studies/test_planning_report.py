"""The planning report: rendered from a plan document alone, the summary first, the paper beside."""
from __future__ import annotations

from longhaul.collectors.studies.planning import synthetic
from longhaul.collectors.studies.planning.report import write_plan_report
from longhaul.collectors.studies.planning.settings import SweepSection
from longhaul.collectors.studies.planning.sweep import headline, run_plan
from longhaul.collectors.studies.planning.trace import Problem


def test_plan_report_has_summary_figures_claims_and_every_configuration(tmp_path):
    trace = synthetic.generate(2, hours=3)
    trace.problems.append(Problem("x.log:7", "no NBYTES <b>"))
    doc = run_plan(trace, SweepSection())
    written = write_plan_report(doc, tmp_path, ("html",))
    html = written[0].read_text()
    assert written == [tmp_path / "plan.html"]
    assert headline(doc)[0].replace("%", "") in html.replace("%", "")
    assert html.index('id="summary"') < html.index('id="trace"') < html.index('id="paper"')
    assert html.count("<svg") == 3                           # Figure 2, Figures 3-6, Figures 7-8
    assert "average slowdown under 1.5x" in html             # the paper's statement, ours beside it
    assert html.count("<tr><td>") >= 64 + 4                  # every configuration and baseline
    assert "x.log:7" in html and "no NBYTES &lt;b&gt;" in html   # bad lines listed, escaped
