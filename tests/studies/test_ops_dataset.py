"""OPS dataset format: writing, loading, validation errors, windows that never cross a run or gap."""
from __future__ import annotations

import json

import numpy as np
import ops_synthetic
import pytest

from longhaul.collectors.studies.ops import dataset as ds


def _write(tmp_path, rows, meta=None, name="d.csv"):
    return ds.write(tmp_path / name, rows, meta or ds.default_meta({"rtt_ms": 128}))


def _rows(cls="cubic", probing="passive", run="r1", n=7, t0=0.0, rtt=150.0):
    return [(cls, probing, run, t0 + i, rtt + i) for i in range(n)]


# ---- classes -----------------------------------------------------------------------------------

def test_six_classes_with_their_background_flows():
    flows = ds.class_flows()
    assert list(flows) == ["none", "cubic", "cubic2", "bbr", "bbr2", "cubic_bbr"]
    assert flows["none"] == []
    assert flows["cubic_bbr"] == [("S1", "cubic"), ("S2", "bbr")]
    assert flows["bbr2"] == [("S1", "bbr"), ("S2", "bbr")]
    # at most two streams, only CUBIC and BBR, on the background pairs S1 and S2
    for f in flows.values():
        assert len(f) <= 2 and all(p in ("S1", "S2") and c in ds.CCAS for p, c in f)
    assert len({tuple(sorted(c for _, c in f)) for f in flows.values()}) == 6  # all distinct mixtures


def test_background_classes_as_cca_lists():
    assert ds.BACKGROUND_CLASSES["cubic_bbr"] == ["cubic", "bbr"]
    assert ds.BACKGROUND_CLASSES["none"] == [] and ds.BACKGROUND_CLASSES["bbr2"] == ["bbr", "bbr"]


@pytest.mark.parametrize("form", ["cca lists", "pairs"])
def test_sidecar_classes_in_the_recorder_forms(tmp_path, form):
    meta = ds.default_meta()
    meta["classes"] = (dict(ds.BACKGROUND_CLASSES) if form == "cca lists"
                       else {n: [list(f) for f in flows] for n, flows in ds.CLASSES.items()})
    data = ds.load(_write(tmp_path, _rows(), meta))
    assert ds.class_flows(data.meta["classes"]) == ds.class_flows()


def test_class_flows_of_a_sidecar():
    meta = ds.default_meta()
    assert ds.class_flows(meta["classes"]) == ds.class_flows()


# ---- round trip --------------------------------------------------------------------------------

def test_synthetic_round_trip(tmp_path):
    path = ops_synthetic.write(tmp_path / "syn.csv", minutes=2, seed=5)
    data = ds.load(path)
    assert data.classes == list(ds.CLASSES)
    assert data.probings() == ["passive", "active"]
    assert len(data.runs) == 12
    assert all(len(r.rtt_ms) == 120 for r in data.runs)
    assert ds.summary(data)["active"]["bbr"] == pytest.approx(2.0)
    assert data.lab["rtt_ms"] == 128
    header = path.read_text().splitlines()[0]
    assert header == "class,probing,run,t_s,rtt_ms"
    assert json.loads(ds.sidecar_path(path).read_text())["format"] == ds.DATASET.name


def test_build_xy_per_probing(tmp_path):
    path = ops_synthetic.write(tmp_path / "syn.csv", minutes=1, seed=1, probings=("passive",))
    data = ds.load(path)
    X, y = ds.build_xy(data, "passive", 10)
    assert X.shape == (36, 10) and y.shape == (36,)
    assert sorted(set(y)) == sorted(ds.CLASSES)
    X, y = ds.build_xy(data, "active", 10)
    assert X.shape == (0, 10) and len(y) == 0
    with pytest.raises(ValueError):
        ds.build_xy(data, "sideways", 10)


# ---- windows -----------------------------------------------------------------------------------

def _run(n, t0=0.0):
    t = np.arange(n) + t0 + 0.003
    return ds.Run("r", "cubic", "passive", t, 100.0 + np.arange(n))


def test_windows_non_overlapping_and_tail_dropped():
    win = ds.run_windows(_run(23), 1.0, 5)
    assert win.shape == (4, 5)
    assert win[0].tolist() == [100, 101, 102, 103, 104] and win[-1].tolist() == [115, 116, 117, 118, 119]
    assert ds.run_windows(_run(4), 1.0, 5).shape == (0, 5)
    assert ds.run_windows(_run(0), 1.0, 5).shape == (0, 5)


@pytest.mark.parametrize("w", [0, -5, 2.5, True, "10"])
def test_windows_bad_w(w):
    with pytest.raises(ValueError):
        ds.run_windows(_run(10), 1.0, w)


def test_windows_never_span_two_runs(tmp_path):
    rows = _rows(run="a", n=7) + _rows(run="b", n=7) + _rows("bbr", run="c", n=10)
    data = ds.load(_write(tmp_path, rows))
    X, y = ds.build_xy(data, "passive", 5)
    # 7 + 7 points of cubic in two runs give two windows, not the two-and-a-bit of 14 points
    assert y.tolist() == ["cubic", "cubic", "bbr", "bbr"]
    assert X[0].tolist() == [150, 151, 152, 153, 154] and X[1].tolist() == [150, 151, 152, 153, 154]


def test_windows_never_span_a_probe_gap(tmp_path):
    rows = _rows(n=7) + [("cubic", "passive", "r1", 20.0 + i, 200.0 + i) for i in range(6)]
    data = ds.load(_write(tmp_path, rows))
    X, _ = ds.build_xy(data, "passive", 5)
    assert X.tolist() == [[150, 151, 152, 153, 154], [200, 201, 202, 203, 204]]


def test_windows_sit_on_the_run_clock(tmp_path):
    # rounds start a few ms into their second (one a little early); round 6 was lost: the window
    # it falls in (5-9) is dropped and the next one still starts at second 10, in phase
    t = [0.003, 1.002, 1.9, 3.004, 4.001, 5.002, 7.003, 8.001, 9.002, 10.004, 11.002, 12.003, 13.001, 14.002]
    rows = [("cubic", "passive", "r1", ts, 100.0 + round(ts)) for ts in t]
    X, _ = ds.build_xy(ds.load(_write(tmp_path, rows)), "passive", 5)
    assert X.tolist() == [[100, 101, 102, 103, 104], [110, 111, 112, 113, 114]]


# ---- validation --------------------------------------------------------------------------------

def _csv(tmp_path, text, meta=None):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    ds.sidecar_path(path).write_text(json.dumps(meta or ds.default_meta()))
    return path


@pytest.mark.parametrize("body, line, fragment", [
    ("class,probing,run,t,rtt_ms\n", 1, "header must be"),
    ("class,probing,run,t_s,rtt_ms\ncubic,passive,r,0,150\nreno,passive,r,1,150\n", 3, "'reno'"),
    ("class,probing,run,t_s,rtt_ms\ncubic,sideways,r,0,150\n", 2, "one of ['passive', 'active']"),
    ("class,probing,run,t_s,rtt_ms\ncubic,passive,,0,150\n", 2, "non-empty run"),
    ("class,probing,run,t_s,rtt_ms\ncubic,passive,r,0,150\ncubic,passive,r,0,151\n", 3, "increasing"),
    ("class,probing,run,t_s,rtt_ms\ncubic,passive,r,0,nan\n", 2, "finite number"),
    ("class,probing,run,t_s,rtt_ms\ncubic,passive,r,0,-3\n", 2, "positive RTT"),
    ("class,probing,run,t_s,rtt_ms\ncubic,passive,r,0,150\nbbr,passive,r,1,150\n", 3, "one class in one probing"),
    ("class,probing,run,t_s,rtt_ms\ncubic,passive,r,0\n", 2, "5 fields"),
    ("class,probing,run,t_s,rtt_ms\n", None, "no data rows"),
])
def test_csv_errors_name_file_and_line(tmp_path, body, line, fragment):
    path = _csv(tmp_path, body)
    with pytest.raises(ds.DatasetError) as err:
        ds.load(path)
    assert err.value.line == line
    assert str(path) in str(err.value) and fragment in str(err.value)


@pytest.mark.parametrize("change, key", [
    ({"format": "csv"}, ("format",)),
    ({"version": 9}, ("version",)),
    ({"classes": {"only": {"flows": []}}}, ("classes",)),
    ({"classes": {"a": {"flows": []}, "b": {"flows": [["S1"]]}}}, ("classes", "b", "flows")),
    ({"probe": {"interval_s": 0}}, ("probe", "interval_s")),
])
def test_sidecar_errors(tmp_path, change, key):
    meta = ds.default_meta()
    meta.update(change)
    path = _csv(tmp_path, "class,probing,run,t_s,rtt_ms\ncubic,passive,r,0,150\n", meta)
    with pytest.raises(ds.DatasetError) as err:
        ds.load(path)
    assert err.value.key == key and err.value.path == ds.sidecar_path(path)


def test_missing_sidecar(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("class,probing,run,t_s,rtt_ms\n")
    with pytest.raises(ds.DatasetError, match="cannot read the sidecar"):
        ds.load(path)


# ---- merging -----------------------------------------------------------------------------------

def _lab(**over):
    return {"topology": {"bottleneck_rate_mbps": 500, "rtt_ms": 128}, "queue_bytes": 6_000_000,
            "roles": {"probe_pair": 4}, "active_profile": [{"cca": "cubic", "seconds": 5}], **over}


def test_merge_keeps_every_run_and_renames_repeats(tmp_path):
    a = ds.load(_write(tmp_path, _rows(run="passive-cubic") + _rows("bbr", "active", "active-bbr", n=10),
                       ds.default_meta(_lab(), recorded="A", active_aligned=True), "a.csv"))
    b = ds.load(_write(tmp_path, _rows(run="passive-cubic", rtt=160) + _rows("bbr", run="passive-bbr"),
                       ds.default_meta(_lab(), recorded="B", active_aligned=True), "b.csv"))
    rows, meta = ds.merge([a, b], ["passive"])
    merged = ds.load(_write(tmp_path, rows, meta, "m.csv"))
    assert sorted(r.run for r in merged.runs) == ["passive-bbr", "passive-cubic", "passive-cubic~2"]
    assert merged.probings() == ["passive"]
    # the two cubic runs stay apart: 7 points each give one w=5 window each, not two of 14
    X, y = ds.build_xy(merged, "passive", 5)
    assert sorted(y.tolist()) == ["bbr", "cubic", "cubic"] and {X[0][0], X[1][0]} <= {150, 160}
    assert [s["recorded"] for s in meta["sources"]] == ["A", "B"] and "recorded" not in meta


def test_merge_refuses_other_conditions(tmp_path):
    a = ds.load(_write(tmp_path, _rows(), ds.default_meta(_lab()), "a.csv"))
    b = ds.load(_write(tmp_path, _rows(), ds.default_meta(_lab(queue_bytes=3_000_000)), "b.csv"))
    with pytest.raises(ds.DatasetError, match="queue_bytes") as err:
        ds.merge([a, b], ["passive"])
    assert err.value.path.name == "b.json"


def test_merge_of_active_runs_needs_the_same_aligned_profile(tmp_path):
    both = _rows() + _rows(probing="active", run="active-cubic")
    a = ds.load(_write(tmp_path, both, ds.default_meta(_lab(), active_aligned=True), "a.csv"))
    b = ds.load(_write(tmp_path, both, ds.default_meta(_lab()), "b.csv"))    # drifting prober
    ds.merge([a, b], ["passive"])
    with pytest.raises(ds.DatasetError, match="active_aligned"):
        ds.merge([a, b], ["passive", "active"])


def test_merge_in_steps_takes_active_runs_from_where_they_are(tmp_path):
    # an old recording's passive runs, then a new one's active runs with the aligned profile
    old = ds.load(_write(tmp_path, _rows() + _rows(probing="active", run="active-cubic"),
                         ds.default_meta(_lab(active_profile=[{"cca": "bbr", "seconds": 9}]), recorded="old"), "old.csv"))
    new = ds.load(_write(tmp_path, _rows(probing="active", run="active-cubic", rtt=170),
                         ds.default_meta(_lab(), recorded="new", active_aligned=True, active_cycle_s=5), "new.csv"))
    rows, meta = ds.merge([old], ["passive"])
    passive = ds.load(_write(tmp_path, rows, meta, "passive.csv"))
    rows, meta = ds.merge([passive, new], ["passive", "active"])
    merged = ds.load(_write(tmp_path, rows, meta, "m.csv"))
    assert sorted((r.probing, r.run, r.rtt_ms[0]) for r in merged.runs) == [
        ("active", "active-cubic", 170.0), ("passive", "r1", 150.0)]
    assert meta["active_aligned"] is True and meta["active_cycle_s"] == 5
    assert meta["lab"]["active_profile"] == [{"cca": "cubic", "seconds": 5}]
    assert [(s["recorded"], s["modes"]) for s in meta["sources"]] == [("old", ["passive"]), ("new", ["active"])]


def test_merge_command(tmp_path, capsys):
    from longhaul.appliance.cli.app import main

    a = _write(tmp_path, _rows(run="passive-cubic"), ds.default_meta(_lab()), "a.csv")
    b = _write(tmp_path, _rows(run="passive-cubic", rtt=160), ds.default_meta(_lab()), "b.csv")
    assert main(["ops", "merge", str(tmp_path / "m.csv"), str(a), str(b)]) == 0
    assert "passive: cubic 0.2 min" in capsys.readouterr().out
    assert sorted(r.run for r in ds.load(tmp_path / "m.csv").runs) == ["passive-cubic", "passive-cubic~2"]
    assert main(["ops", "merge", str(a), str(a), str(b)]) == 2              # never overwrite an input
    assert "not one of the inputs" in capsys.readouterr().err
    assert main(["ops", "merge", str(tmp_path / "n.csv"), str(a), "--probing", "active"]) == 2
    assert not (tmp_path / "n.csv").exists()


def test_join_is_the_merge_kept_in_memory(tmp_path):
    a = ds.load(_write(tmp_path, _rows(run="passive-cubic"), ds.default_meta(_lab(), recorded="A"), "a.csv"))
    b = ds.load(_write(tmp_path, _rows(run="passive-cubic", rtt=160) + _rows("bbr", "active", "active-bbr"),
                       ds.default_meta(_lab(), recorded="B"), "b.csv"))
    joined = ds.join([a, b], ["passive"])
    rows, meta = ds.merge([a, b], ["passive"])
    written = ds.load(_write(tmp_path, rows, meta, "m.csv"))
    assert joined.paths == (a.path, b.path) and joined.meta == written.meta
    for mine, theirs in zip(joined.runs, written.runs):
        assert (mine.run, mine.cls, mine.probing) == (theirs.run, theirs.cls, theirs.probing)
        assert np.array_equal(mine.t_s, theirs.t_s) and np.array_equal(mine.rtt_ms, theirs.rtt_ms)
    assert ds.join([a]) is a and a.paths == (a.path,)
    with pytest.raises(ds.DatasetError, match="queue_bytes"):
        ds.join([a, ds.load(_write(tmp_path, _rows(), ds.default_meta(_lab(queue_bytes=1)), "c.csv"))])
