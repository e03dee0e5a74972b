"""The run store without a run: typed records, the file writer and its mirrors, the lenient reader."""

from __future__ import annotations

import json

import pytest

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.provenance import run_manifest
from longhaul.collectors.store.reader import StoredRun, load_store
from longhaul.collectors.store.records import (
    CellEntry,
    DeclaredCell,
    FlowDecl,
    FlowResult,
    Measure,
    RateMeasure,
    Setting,
    Tolerance,
    Topology,
    TrialSummary,
    Verification,
)
from longhaul.collectors.store.writer import FileRunWriter, RunWriter, TriallessRun, summary_doc
from longhaul.core.paths import REPO
from longhaul.core.tables import write_json


def entry(cell_id: str = "tiny-001", status: str = "pending") -> CellEntry:
    return CellEntry(id=cell_id, profile="tiny", scenario="base", params={"scenario": "base"},
                     topology=Topology(pairs=1, access_rate_mbps=1000.0, bottleneck_rate_mbps=100.0, rtt_ms=20.0,
                                       queue_bytes=250000, mtu=1500),
                     labels={}, status=status,
                     flows=[FlowDecl(name="fg", role="foreground", tool="iperf3", protocol="tcp", cca="cubic", pair=1,
                                     streams=1, pattern="constant")])


def trial(k: int, mbps: float | None, status: str = "ok") -> TrialSummary:
    return TrialSummary(trial=k, status=status, started="2026-11-23T22:00:00Z", duration_s=1.0,
                        flows=[FlowResult(name="fg", role="foreground", tool="iperf3", protocol="tcp", cca="cubic",
                                          pair=1, streams=1, pattern="constant", bytes=1e6, on_s=1.0, mean_mbps=mbps)])


def verification(ok: bool = True) -> Verification:
    return Verification(ok=ok, problems=[] if ok else ["idle RTT 30.0 ms vs configured 20 ms"],
                        tolerance=Tolerance(rtt_ms=2.0, rate_mbps=5.0),
                        rtt_ms=Measure(configured=20.0, measured=20.1 if ok else 30.0),
                        rate_mbps=RateMeasure(configured=100.0, measured=99.8, goodput=95.0),
                        queue_bytes=Setting(configured=250000), attempt=1)


class Recorder:
    """A second store (as an InfluxDB store will be): keeps the events it is handed."""

    run_id = "recorder"

    def __init__(self):
        self.events = []

    def write_manifest(self, manifest):
        self.events.append(("manifest", manifest.run_id))

    def begin_cell(self, entry):
        self.events.append(("begin", entry.id))
        return entry

    def record_verification(self, entry, verification):
        entry.set_lab(verification)
        self.events.append(("verified", entry.id, verification.ok))

    def record_trial(self, entry, trial):
        entry.add_trial(trial)                          # the same entry the file store changed: idempotent
        self.events.append(("trial", entry.id, trial.trial, len(entry.trials)))

    def end_cell(self, entry, status, error=None):
        entry.end(status, error)
        self.events.append(("end", entry.id, status))

    def finish(self, status):
        self.events.append(("finish", status))


class Broken(Recorder):
    def record_trial(self, entry, trial):
        raise ConnectionError("database gone")


def test_records_read_leniently_and_keep_what_they_do_not_know():
    doc = {"id": "c", "trials": [{"trial": 1, "status": "ok", "flows": [{"name": "fg", "mean_mbps": 5, "new": 1}],
                                  "decisions": 3}],
           "lab": {"ok": True, "tolerance": {"rtt_ms": 2.0, "rate_percent": 2.0}}, "future": {"x": 1}}
    cell = CellEntry.from_dict(doc)
    assert cell.trials[0].flows[0].extra == {"new": 1} and cell.trials[0].extra == {"decisions": 3}
    assert cell.lab.tolerance.rtt_ms == 2.0 and cell.lab.tolerance.extra == {"rate_percent": 2.0}
    assert cell.extra == {"future": {"x": 1}} and cell.flows == [] and cell.stats is None
    out = cell.to_dict()
    assert out["future"] == {"x": 1} and out["trials"][0]["decisions"] == 3
    assert list(out)[:13] == ["id", "profile", "scenario", "params", "topology", "labels", "reference", "status",
                              "flows", "lab", "trials", "stats", "jain"]
    assert "error" not in out                             # written only once a cell has one
    assert CellEntry.from_dict(out) == cell
    assert CellEntry.from_dict({"flows": None, "trials": "garbage"}).trials == []
    assert Verification.from_dict(verification().to_dict()) == verification()


def test_cell_statistics_follow_the_trials():
    cell = entry()
    cell.add_trial(trial(1, 100.0))
    cell.add_trial(trial(2, 110.0))
    cell.add_trial(trial(3, None, status="failed"))         # not counted
    assert cell.stats.flows["fg"].n == 2 and cell.stats.flows["fg"].mean_mbps == 105.0
    assert cell.stats.flows["fg"].std_mbps == pytest.approx(7.0711, abs=1e-4)
    assert cell.stats.jain.n == 0 and cell.jain is None
    cell.add_trial(trial(2, 120.0))                         # the same trial again replaces it
    assert [t.trial for t in cell.trials] == [1, 3, 2] and cell.stats.flows["fg"].mean_mbps == 110.0


def test_file_writer_writes_the_documented_files_and_mirrors_them(tmp_path):
    recorder, broken = Recorder(), Broken()
    store = FileRunWriter.create(tmp_path, "20261123-000000-abcdef", mirrors=[recorder, broken])
    assert isinstance(store, RunWriter)
    store.write_manifest(run_manifest(store.run_id, repo=REPO, backend="fake", cells=[]))
    cell = store.begin_cell(entry())
    store.record_verification(cell, verification())
    store.record_trial(cell, trial(1, 100.0))               # the broken mirror fails: the run goes on
    store.end_cell(cell, "complete")
    store.finish("complete")
    assert recorder.events == [("manifest", store.run_id), ("begin", "tiny-001"), ("verified", "tiny-001", True),
                               ("trial", "tiny-001", 1, 1), ("end", "tiny-001", "complete"), ("finish", "complete")]
    manifest = json.loads((store.dir / fmt.MANIFEST).read_text())
    assert (manifest["format"], manifest["version"], manifest["status"]) == (fmt.RUN_FORMAT, 1, "complete")
    assert list(manifest)[:8] == ["format", "version", "run_id", "started", "finished", "status", "longhaul", "host"]
    summary = json.loads((store.dir / fmt.SUMMARY).read_text())
    assert summary["format"] == fmt.SUMMARY_FORMAT and summary["cells"] == [cell.to_dict()]
    assert json.loads((fmt.trial_dir(store.dir, "tiny-001", 1) / fmt.TRIAL_JSON).read_text()) == trial(1, 100.0).to_dict()
    assert load_store(store.dir).entries == [cell]


def test_the_summary_is_written_a_changed_cell_at_a_time_as_write_json_writes_it(tmp_path):
    """summary.json keeps each cell's text and encodes again only the cell an event changed (at 630
    cells x 10 trials, encoding them all after every event took 0.7 s); its bytes are write_json's."""
    store = FileRunWriter.create(tmp_path, "r")
    store.write_manifest(run_manifest("r", repo=REPO, cells=[]))

    def whole() -> str:
        write_json(tmp_path / "whole.json", summary_doc("r", store.manifest.status, store.cells))
        return (tmp_path / "whole.json").read_text()

    store.write_summary()
    assert (store.dir / fmt.SUMMARY).read_text() == whole()                       # no cells yet
    a, b = store.begin_cell(entry("a")), store.begin_cell(entry("b"))
    a.status = "running"                        # as the runner sets it, with no event of its own
    store.record_verification(a, verification())
    store.record_trial(a, trial(1, 100.0))
    assert (store.dir / fmt.SUMMARY).read_text() == whole()
    b.status = "running"
    store.write_summary()
    assert json.loads((store.dir / fmt.SUMMARY).read_text())["cells"][1]["status"] == "running"
    store.record_trial(a, trial(2, 90.0))
    store.end_cell(a, "complete")
    store.end_cell(b, "failed", "no result")
    store.finish("failed")
    assert (store.dir / fmt.SUMMARY).read_text() == whole()


def test_resume_forgets_failures_and_refusals(tmp_path):
    store = FileRunWriter.create(tmp_path, "r")
    store.write_manifest(run_manifest("r", repo=REPO, cells=[]))
    (store.dir / fmt.CONFIG_SNAPSHOT).write_text("")
    ok, refused = store.begin_cell(entry("a")), store.begin_cell(entry("b"))
    store.record_trial(ok, trial(1, 100.0))
    store.record_trial(ok, trial(2, None, status="interrupted"))
    store.record_verification(refused, verification(ok=False))
    store.end_cell(refused, "refused", "idle RTT off")
    store.finish("interrupted")
    again = FileRunWriter.open(store.dir)
    assert again.done_trials() == {("a", 1)}
    again.resumed()
    a, b = again.cells
    assert [t.trial for t in a.trials] == [1]
    assert (b.status, b.lab, b.error) == ("pending", None, None)
    assert json.loads((store.dir / fmt.MANIFEST).read_text())["status"] == "running"
    with pytest.raises(FileNotFoundError, match="not a resumable"):
        FileRunWriter.open(tmp_path)


def test_reader_rebuilds_a_lost_summary_from_the_cell_files(tmp_path):
    store = FileRunWriter.create(tmp_path, "r")
    store.write_manifest(run_manifest("r", repo=REPO, cells=[DeclaredCell(id="a", profile="tiny"),
                                                              DeclaredCell(id="never", profile="tiny")]))
    cell = store.begin_cell(entry("a"))
    store.record_verification(cell, verification())
    store.record_trial(cell, trial(2, 90.0))
    store.record_trial(cell, trial(1, 100.0))
    (store.dir / fmt.SUMMARY).unlink()
    run = load_store(store.dir)
    assert isinstance(run, StoredRun) and run.status == "running"
    assert any("rebuilt from the per-trial trial.json files" in p for p in run.problems)
    a, never = run.entries
    assert [t.trial for t in a.trials] == [1, 2] and a.lab.ok and a.stats.flows["fg"].n == 2
    assert never.id == "never" and never.trials == [] and never.topology == Topology()
    assert never.params == {} and run.summary["cells"][1]["trials"] == []    # the document: keys all there


def test_reader_notes_truncated_files_and_refuses_foreign_ones(tmp_path):
    store = FileRunWriter.create(tmp_path, "r")
    store.write_manifest(run_manifest("r", repo=REPO, cells=[]))
    store.finish("complete")
    (store.dir / fmt.SUMMARY).write_text('{"format": "longhaul-summary", "ver')
    run = load_store(store.dir)
    assert run.entries == [] and any("summary.json is unreadable" in p for p in run.problems)
    (store.dir / fmt.MANIFEST).write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(fmt.StoreVersionError, match="not a longhaul run store"):
        load_store(store.dir)
    with pytest.raises(fmt.StoreError, match="not a run directory"):
        load_store(tmp_path / "nothing")


def test_a_trialless_run_is_a_run_directory(tmp_path):
    run_dir = tmp_path / "20261123-000000-eval00"
    run_dir.mkdir()
    run = TriallessRun(run_dir, run_manifest(run_dir.name, repo=REPO, kind="ops-evaluation", config={"w": 10}))
    assert load_store(run_dir).status == "running"
    run.finish("complete")
    loaded = load_store(run_dir)
    assert loaded.status == "complete" and loaded.entries == [] and loaded.manifest.kind == "ops-evaluation"
    assert loaded.manifest.finished and loaded.manifest.config == {"w": 10}


def test_a_misspelt_record_key_fails_where_the_record_is_made():
    """Verification and trials build their records with keyword arguments: a misspelt key is an
    error at once, where reading a stored document (from_dict) keeps unknown keys as `extra`."""
    from longhaul.collectors.store.records import TrialSummary, Verification
    with pytest.raises(TypeError, match="rtt_msec"):
        Verification(ok=True, rtt_msec=20.0)
    with pytest.raises(TypeError, match="statsu"):
        TrialSummary(trial=1, statsu="ok")
    assert Verification.from_dict({"ok": True, "rtt_msec": 20.0}).extra == {"rtt_msec": 20.0}
