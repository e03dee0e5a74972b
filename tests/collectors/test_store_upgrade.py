"""A run stored by the longhaul of version 1 (tests/data/run-v1) stays readable, through the
upgrade path, and its report still renders.

The fixture is a real `longhaul run` of the quickstart profile at --time-scale 0.2 on the netns lab
(run 20261123-222341-a39045), stripped of its reports, the lab's working files and the tools' raw
output except fping's; every JSON and CSV the reader reads is as the run wrote it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store import upgrade as upgrade_mod
from longhaul.collectors.store.manifest import HostInfo
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.records import CellEntry, TrialSummary, Verification
from longhaul.collectors.store.writer import FileRunWriter, summary_doc
from longhaul.collectors.studies import registry
from longhaul.core.tables import write_json
from longhaul.reports import render

V1 = Path(__file__).parents[1] / "data" / "run-v1" / "20261123-222341-a39045"
CELLS = ["quickstart-001", "quickstart-002", "quickstart-003"]


def files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture
def v1_run(tmp_path) -> Path:
    return Path(shutil.copytree(V1, tmp_path / V1.name))


def test_the_v1_run_loads_typed(v1_run):
    store = load_store(v1_run)
    assert store.versions == {"manifest": 1, "summary": 1} and store.problems == []
    assert store.status == "complete" and store.run_id == V1.name
    assert [e.id for e in store.entries] == CELLS
    alone, vs_cubic, vs_bbr = store.entries
    assert [f.name for f in alone.flows] == ["fg"] and [f.name for f in vs_bbr.flows] == ["fg", "bg"]
    assert vs_bbr.flows[1].cca == "bbr" and vs_bbr.trials[0].flow("bg").observed_cca == ["bbr"]
    assert alone.lab.ok and alone.lab.rtt_ms.measured == 129.4 and alone.lab.tolerance.rtt_ms == 3.84
    assert alone.trials[0].flows[0].mean_mbps == pytest.approx(420.626, abs=1e-3)
    assert alone.stats.flows["fg"].n == 1 and alone.jain is None and vs_cubic.jain is not None
    series = store.trial_series("quickstart-002", 1)
    assert set(series.throughput) == {"fg", "bg"} and len(series.rtt[0]) > 5 and not series.problems
    assert [d.id for d in store.manifest.cells] == CELLS and store.manifest.cells[0].cell["tuning"]["cca"] == "cubic"


def test_typed_records_give_back_exactly_what_v1_wrote():
    """from_dict then to_dict is the identity on every document of the run, down to key order,
    and the writer's summary of those records is the file, byte for byte."""
    summary = json.loads((V1 / fmt.SUMMARY).read_text())
    cells = [CellEntry.from_dict(c) for c in summary["cells"]]
    assert json.dumps([c.to_dict() for c in cells]) == json.dumps(summary["cells"])
    assert all(not c.extra and not c.lab.extra and not c.trials[0].extra for c in cells)   # nothing unknown
    text = json.dumps(summary_doc(summary["run_id"], summary["status"], cells), indent=1) + "\n"
    assert text == (V1 / fmt.SUMMARY).read_text()
    for cid in CELLS:
        trial = json.loads((V1 / fmt.CELLS_DIR / cid / "trial-1" / fmt.TRIAL_JSON).read_text())
        assert json.dumps(TrialSummary.from_dict(trial).to_dict()) == json.dumps(trial)
        lab = json.loads((V1 / fmt.CELLS_DIR / cid / fmt.VERIFICATION).read_text())
        assert json.dumps(Verification.from_dict(lab).to_dict()) == json.dumps(lab)


def test_the_v1_run_renders_its_report(v1_run):
    before = files(v1_run)
    html = render.render_html(v1_run, sections=registry.SECTIONS)
    assert all(cid in html for cid in CELLS) and "<svg" in html
    assert files(v1_run) == before                  # rendering reads only


def test_version_1_is_current_and_reads_without_a_step(v1_run):
    assert fmt.RUN_DOC.version == fmt.SUMMARY_DOC.version == 1
    assert not any(kind in (fmt.RUN_FORMAT, fmt.SUMMARY_FORMAT) for kind, _ in upgrade_mod.UPGRADES)
    doc = json.loads((v1_run / fmt.SUMMARY).read_text())
    assert upgrade_mod.upgrade(doc, fmt.SUMMARY_FORMAT, v1_run / fmt.SUMMARY) is doc


def _v1_to_2_summary(doc: dict) -> dict:
    """A made-up version 2: a cell's `jain` moves into `stats`."""
    for cell in doc["cells"]:
        cell["stats"]["jain_of_means"] = cell.pop("jain")
    return doc


def _v1_to_2_run(doc: dict) -> dict:
    doc["controller"] = doc.pop("host")
    return doc


@pytest.fixture
def version_2(monkeypatch):
    """This longhaul as if it wrote version 2, with the steps from version 1 registered."""
    monkeypatch.setattr(fmt.RUN_DOC, "version", 2)
    monkeypatch.setattr(fmt.SUMMARY_DOC, "version", 2)
    monkeypatch.setitem(upgrade_mod.UPGRADES, (fmt.SUMMARY_FORMAT, 1), _v1_to_2_summary)
    monkeypatch.setitem(upgrade_mod.UPGRADES, (fmt.RUN_FORMAT, 1), _v1_to_2_run)


def test_a_v1_run_is_upgraded_on_read_and_left_as_it_is(v1_run, version_2):
    before = files(v1_run)
    store = load_store(v1_run)
    assert store.versions == {"manifest": 1, "summary": 1}
    assert store.manifest.version == 2 and store.manifest.extra["controller"]["hostname"]
    assert store.manifest.host == HostInfo()         # moved by the step
    assert store.summary["version"] == 2
    assert store.entries[0].extra == {} and store.entries[1].stats.extra["jain_of_means"] is not None
    assert store.entries[1].jain is None            # moved by the step
    assert files(v1_run) == before                  # read, never rewritten


def test_unknown_versions_are_refused_with_the_readable_ones_named(v1_run, version_2):
    doc = json.loads((v1_run / fmt.MANIFEST).read_text())
    doc["version"] = 3
    write_json(v1_run / fmt.MANIFEST, doc)
    with pytest.raises(fmt.StoreVersionError, match=r"version 3 is not supported.*reads version 1, 2"):
        load_store(v1_run)
    assert upgrade_mod.readable_versions(fmt.RUN_FORMAT) == [1, 2]


def test_resuming_a_v1_run_writes_it_back_in_the_current_version(v1_run, version_2):
    store = FileRunWriter.open(v1_run)
    assert store.manifest.version == 2 and store.entry("quickstart-002").stats.extra["jain_of_means"]
    store.resumed()
    store.finish("complete")
    assert json.loads((v1_run / fmt.SUMMARY).read_text())["version"] == 2
    assert json.loads((v1_run / fmt.MANIFEST).read_text())["version"] == 2
