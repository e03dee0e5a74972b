"""Classifiers and cross-validation on a small synthetic dataset; `longhaul ops evaluate` output."""
from __future__ import annotations

import json

import numpy as np
import ops_synthetic
import pytest

from longhaul.appliance.cli.app import main
from longhaul.collectors.studies.ops import classify as oc
from longhaul.collectors.studies.ops import dataset as ops_dataset

N_CLASSES = len(ops_dataset.CLASSES)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return ops_synthetic.write(tmp_path_factory.mktemp("ops") / "syn.csv", minutes=4, seed=2)


@pytest.fixture(scope="module")
def dataset(dataset_path):
    return ops_dataset.load(dataset_path)


@pytest.fixture(scope="module")
def full_eval(dataset):
    """Every classifier, both probing modes, w = 10 and 20."""
    return oc.evaluate(dataset, ws=[10, 20])


def test_every_classifier_far_above_chance(full_eval):
    chance = 1 / N_CLASSES
    assert len(full_eval["results"]) == 2 * 2 * 6  # probings x ws x (1/3/5-NN, MLP, SVM, GNB)
    for r in full_eval["results"]:
        assert r["accuracy_mean"] > 3 * chance, r


def test_result_entries_and_fold_structure(full_eval):
    keys = {"classifier", "k", "w", "probing", "accuracy_mean", "accuracy_folds"}
    for r in full_eval["results"]:
        assert keys <= set(r)
        assert len(r["accuracy_folds"]) == 5
        assert r["accuracy_mean"] == pytest.approx(np.mean(r["accuracy_folds"]))
        assert (r["k"] in (1, 3, 5)) == (r["classifier"] == "knn")
        assert r["n_windows"] == N_CLASSES * 4 * 60 // r["w"]
    combos = {(r["probing"], r["w"], r["classifier"], r["k"]) for r in full_eval["results"]}
    assert len(combos) == len(full_eval["results"])


def test_details_confusion_and_report(full_eval):
    details = full_eval["details"]
    assert {d["w"] for d in details} == {10}
    assert len(details) == 2 * 6
    for d in details:
        cm = np.array(d["confusion"])
        assert cm.shape == (N_CLASSES, N_CLASSES)
        assert cm.sum() == N_CLASSES * 24  # every window predicted once, out of fold
        assert cm.sum(axis=1).tolist() == [24] * N_CLASSES  # stratified: 24 windows per true class
        assert d["accuracy"] == pytest.approx(np.trace(cm) / cm.sum())
        assert set(d["per_class"]) == set(ops_dataset.CLASSES)
        for m in d["per_class"].values():
            assert {"precision", "recall", "f1", "support"} <= set(m)


def test_settings_record_normalisation_and_dataset(full_eval, dataset_path):
    s = full_eval["settings"]
    assert s["folds"] == 5 and s["shuffle"] is True and s["dtw_window"] == 10
    assert set(s["normalisation"]) == {"knn", "mlp", "svm", "gnb"}
    assert full_eval["dataset"]["name"] == dataset_path.stem
    assert full_eval["dataset"]["class_flows"]["cubic_bbr"] == [("S1", "cubic"), ("S2", "bbr")]
    json.dumps(full_eval)  # serialisable as is


def test_stratified_folds_keep_class_shares(dataset):
    from sklearn.model_selection import StratifiedKFold

    X, y = ops_dataset.build_xy(dataset, "passive", 10)
    for _, test in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        _, counts = np.unique(y[test], return_counts=True)
        assert counts.max() - counts.min() <= 1


def test_knn_ks_share_one_neighbour_search(dataset):
    X, y = ops_dataset.build_xy(dataset, "active", 10)
    train, test = np.arange(0, len(y), 2), np.arange(1, len(y), 2)
    preds, _, _ = oc.fold_predictions(X, y, train, test, oc.specs(["knn"], [1, 3]))
    for k in (1, 3):
        direct = oc.make_estimator("knn", k=k).fit(X[train], y[train]).predict(X[test])
        assert np.array_equal(preds[oc.Spec("knn", k)], direct)


def test_reproducible(dataset):
    a = oc.evaluate(dataset, ["passive"], [15], ["knn", "gnb"], [1])
    b = oc.evaluate(dataset, ["passive"], [15], ["knn", "gnb"], [1])
    assert [r["accuracy_folds"] for r in a["results"]] == [r["accuracy_folds"] for r in b["results"]]


def test_too_few_windows_skipped(dataset):
    ev = oc.evaluate(dataset, ["passive"], [60], ["gnb"])  # 4 windows per class < 5 folds
    assert ev["results"] == [] and ev["skipped"][0]["w"] == 60


def test_unknown_classifier():
    with pytest.raises(ValueError):
        oc.specs(["forest"])


# ---- the command -------------------------------------------------------------------------------

def test_evaluate_json_shape(dataset_path, capsys, tmp_path):
    rc = main(["ops", "evaluate", str(dataset_path), "--json", "--w", "10,20",
               "--classifiers", "knn,gnb", "--probing", "active", "--out", str(tmp_path / "run")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert len(out["results"]) == 2 * 4
    for r in out["results"]:
        assert set(r) >= {"classifier", "k", "w", "probing", "accuracy_mean", "accuracy_folds"}
        assert r["probing"] == "active" and r["w"] in (10, 20)
        assert (r["k"] is None) == (r["classifier"] == "gnb")
    stored = json.loads((tmp_path / "run" / "ops" / "evaluation.json").read_text())
    assert stored["results"] == out["results"]
    # the new directory became a run of its own, with a report that has the OPS section and no
    # empty trial tables
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["kind"] == "ops-evaluation" and manifest["config"]["dataset"] == str(dataset_path)
    html = (tmp_path / "run" / "report.html").read_text()
    assert 'id="ops"' in html and 'id="verification"' not in html
    assert (tmp_path / "run" / "report.pdf").stat().st_size > 10_000


def test_evaluate_into_a_json_file(dataset_path, tmp_path):
    assert main(["ops", "evaluate", str(dataset_path), "--w", "20", "--classifiers", "gnb",
                 "--out", str(tmp_path / "e" / "ev.json")]) == 0
    assert json.loads((tmp_path / "e" / "ev.json").read_text())["results"]
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == ["ev.json"]


def test_evaluate_tables(dataset_path, capsys):
    assert main(["ops", "evaluate", str(dataset_path), "--w", "20", "--classifiers", "gnb"]) == 0
    text = capsys.readouterr().out
    assert "passive probing" in text and "GNB" in text


@pytest.mark.parametrize("args, fragment", [
    (["--w", "0"], "--w"),
    (["--w", "ten"], "--w"),
    (["--probing", "sideways"], "--probing"),
    (["--classifiers", "forest"], "--classifiers"),
    (["--folds", "1"], "--folds"),
])
def test_evaluate_bad_arguments_exit_2(dataset_path, capsys, args, fragment):
    assert main(["ops", "evaluate", str(dataset_path), *args]) == 2
    assert fragment in capsys.readouterr().err


def test_evaluate_bad_dataset_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("class,probing,run,t_s,rtt_ms\n")
    assert main(["ops", "evaluate", str(bad)]) == 2
    assert "sidecar" in capsys.readouterr().err


# ---- held-out evaluation (--test) --------------------------------------------------------------

@pytest.fixture(scope="module")
def other_path(tmp_path_factory):
    """A second recording of the same synthetic classes (another seed: new noise and phases)."""
    return ops_synthetic.write(tmp_path_factory.mktemp("ops") / "other.csv", minutes=2, seed=7)


def test_held_out_trains_on_one_recording_and_tests_on_the_other(dataset, other_path):
    other = ops_dataset.load(other_path)
    ev = oc.evaluate(dataset, ["passive"], [10], ["knn", "gnb"], [1], test=other)
    assert ev["settings"]["mode"] == "held-out" and ev["settings"]["folds"] == 1
    assert ev["settings"]["test_dataset"]["name"] == "other"
    n_test = len(ops_dataset.build_xy(other, "passive", 10)[1])
    for r in ev["results"]:
        assert len(r["accuracy_folds"]) == 1 and r["n_windows"] == n_test
        assert r["accuracy_mean"] > 2 / N_CLASSES, r   # same generator, new noise and phases
        assert 0 <= r["decision_accuracy_mean"] <= 1
    # the confusion matrix counts every window of the test recording once
    knn = next(d for d in ev["details"] if d["classifier"] == "knn")
    assert int(np.sum(knn["confusion"])) == n_test


def test_held_out_on_itself_is_perfect_for_1nn(dataset):
    """Every test window is also a training window at distance 0: 1-NN must get each right,
    which checks that the test windows are the ones predicted and scored."""
    ev = oc.evaluate(dataset, ["active"], [20], ["knn"], [1], test=dataset)
    assert ev["results"][0]["accuracy_mean"] == 1.0


def test_both_ways_tests_every_window_of_both_by_the_model_that_did_not_see_it(dataset, other_path):
    other = ops_dataset.load(other_path)
    ev = oc.evaluate(dataset, ["passive"], [10], ["knn", "gnb"], [1], test=other, both=True)
    one = oc.evaluate(dataset, ["passive"], [10], ["knn", "gnb"], [1], test=other)
    back = oc.evaluate(other, ["passive"], [10], ["knn", "gnb"], [1], test=dataset)
    assert ev["settings"]["mode"] == oc.BOTH_WAYS and ev["settings"]["folds"] == 2
    n_other, n_first = (len(ops_dataset.build_xy(d, "passive", 10)[1]) for d in (other, dataset))
    assert n_other != n_first      # so a plain mean of the two directions would differ from the pooled one
    for r, a, b in zip(ev["results"], one["results"], back["results"]):
        assert r["n_windows"] == n_other + n_first
        assert r["accuracy_folds"] == [a["accuracy_mean"], b["accuracy_mean"]]
        pooled = (a["accuracy_mean"] * n_other + b["accuracy_mean"] * n_first) / (n_other + n_first)
        assert r["accuracy_mean"] == pytest.approx(pooled)
        assert r["decision_accuracy_mean"] == pytest.approx(
            (a["decision_accuracy_mean"] * n_other + b["decision_accuracy_mean"] * n_first) / (n_other + n_first))
    knn = next(d for d in ev["details"] if d["classifier"] == "knn")
    assert int(np.sum(knn["confusion"])) == n_other + n_first
    assert knn["accuracy"] == pytest.approx(ev["results"][0]["accuracy_mean"])


def test_both_ways_without_a_test_recording_exits_2(dataset_path, capsys):
    assert main(["ops", "evaluate", str(dataset_path), "--both-ways", "--classifiers", "gnb"]) == 2
    assert "--both-ways" in capsys.readouterr().err


def test_evaluate_test_option(dataset_path, other_path, capsys, tmp_path):
    rc = main(["ops", "evaluate", str(dataset_path), "--test", str(other_path), "--w", "10",
               "--classifiers", "gnb", "--json", "--out", str(tmp_path / "run")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["mode"] == "held-out" and out["results"]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["test"] == str(other_path)
    html = (tmp_path / "run" / "report.html").read_text()
    assert "did not see" in html and "held-out recording" in html


def test_evaluate_test_with_other_conditions_exit_2(dataset_path, tmp_path, capsys):
    lab = {"name": "elsewhere", "bottleneck_rate_mbps": 500, "rtt_ms": 128, "queue_bytes": 2_000_000}
    other = ops_dataset.write(tmp_path / "shallow.csv", ops_synthetic.rows(minutes=1, seed=3),
                              ops_dataset.default_meta(lab))
    assert main(["ops", "evaluate", str(dataset_path), "--test", str(other), "--classifiers", "gnb"]) == 2
    err = capsys.readouterr().err
    assert "shallow.json" in err and "queue_bytes" in err and "to test a model trained on it" in err


def test_evaluate_test_defaults_to_the_modes_both_recordings_have(capsys):
    """The shipped session-4 recording has passive and active runs, session 5's only passive."""
    from pathlib import Path
    shipped = Path(__file__).resolve().parents[2] / "datasets"
    rc = main(["ops", "evaluate", str(shipped / "ops-overlay1-s4.csv"), "--test", str(shipped / "ops-overlay1-s5.csv"),
               "--w", "10", "--classifiers", "knn", "--k", "1", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["probings"] == ["passive"] and len(out["results"]) == 1
    # the figure docs/ops-results.md quotes for a model of one recording tested on the other
    assert out["results"][0]["accuracy_mean"] == pytest.approx(0.694, abs=0.001)


def test_evaluate_and_train_join_several_recordings(dataset_path, other_path, tmp_path, capsys):
    """A recording made in sittings is given as its files: the same figures as the merged file."""
    merged = tmp_path / "merged.csv"
    assert main(["ops", "merge", str(merged), str(dataset_path), str(other_path), "--probing", "passive"]) == 0
    capsys.readouterr()
    args = ["--probing", "passive", "--w", "10", "--classifiers", "knn", "--k", "1", "--json"]
    assert main(["ops", "evaluate", str(dataset_path), str(other_path), *args]) == 0
    joined = json.loads(capsys.readouterr().out)
    assert main(["ops", "evaluate", str(merged), *args]) == 0
    written = json.loads(capsys.readouterr().out)
    assert joined["results"][0]["accuracy_folds"] == written["results"][0]["accuracy_folds"]
    assert joined["dataset"]["name"] == f"{dataset_path.stem} + {other_path.stem}"
    assert [f["path"] for f in joined["dataset"]["files"]] == [str(dataset_path), str(other_path)]
    assert len({f["sha256"] for f in joined["dataset"]["files"]} | {joined["dataset"]["sha256"]}) == 3
    # held out against two recordings, and a model from two
    assert main(["ops", "evaluate", str(dataset_path), "--test", str(other_path), str(merged), *args]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["test_dataset"]["name"].count(" + ") == 1
    model = tmp_path / "m.npz"
    assert main(["ops", "train", str(dataset_path), str(other_path), "--probing", "passive", "--w", "10",
                 "--out", str(model)]) == 0
    n = len(ops_dataset.build_xy(ops_dataset.load(merged), "passive", 10)[1])
    assert f"({n} windows of w=10" in capsys.readouterr().out
