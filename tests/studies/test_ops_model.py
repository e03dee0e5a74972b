"""A trained model stored as data: save/load without pickle, classify, decide; `ops train/classify`."""
from __future__ import annotations

import json

import numpy as np
import ops_synthetic
import pytest

from longhaul.appliance.cli.app import main
from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.collectors.studies.ops import decision as ops_decision
from longhaul.collectors.studies.ops import model as ops_model

BBR_PRESENT = {"bbr", "bbr2", "cubic_bbr"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = ops_synthetic.write(tmp_path_factory.mktemp("ops") / "syn.csv", minutes=4, seed=4)
    return ops_dataset.load(path)


@pytest.fixture(scope="module")
def model(dataset):
    return ops_model.train(dataset, "passive", 10, "knn", k=1)


def test_round_trip_is_data_only(model, tmp_path):
    path = ops_model.save(model, tmp_path / "m.npz")
    assert path == tmp_path / "m.npz"
    with np.load(path, allow_pickle=False) as npz:  # loads without pickle ...
        assert sorted(npz.files) == ["X", "meta", "y"]
        assert all(npz[name].dtype.kind in "fU" for name in npz.files)  # ... and holds no objects
    back = ops_model.load(path)
    assert np.array_equal(back.X, model.X) and np.array_equal(back.y, model.y)
    assert back.meta == json.loads(json.dumps(model.meta))
    assert back.w == 10 and back.classes == list(ops_dataset.CLASSES) and back.probing == "passive"
    assert back.meta["classifier"] == "knn" and back.meta["k"] == 1 and back.meta["dtw_window"] == 10
    assert back.meta["lab"]["rtt_ms"] == 128
    assert back.meta["decision"]["mapping"] == ops_decision.rule_mapping()


def test_classify_and_decide(model):
    rng = np.random.default_rng(1)
    idle = ops_synthetic.series("none", "passive", 30, rng)
    assert ops_model.classify(model, idle) == "none"
    assert ops_model.decide(model, idle) == ("none", "cubic")
    result = ops_model.classify_detail(model, idle)
    assert result["class"] == "none" and result["cca"] == "cubic"
    assert result["points_used"] == 10 and result["points_given"] == 30
    assert result["window_ms"] == pytest.approx(list(idle[-10:]))
    assert result["neighbours"][0]["class"] == "none"
    bbr = ops_synthetic.series("bbr2", "passive", 30, rng)
    result = ops_model.classify_detail(model, bbr)
    assert result["class"] in BBR_PRESENT and result["cca"] == "bbr"
    assert result["flows"] == [list(f) for f in ops_dataset.CLASSES[result["class"]]]


def test_classify_needs_w_points(model):
    with pytest.raises(ValueError, match="at least w=10"):
        ops_model.classify(model, [130.0] * 9)
    with pytest.raises(ValueError, match="finite"):
        ops_model.classify(model, [130.0] * 9 + [np.nan])


def test_refitted_classifier_is_deterministic(dataset, tmp_path):
    path = ops_model.save(ops_model.train(dataset, "active", 20, "gnb"), tmp_path / "g.npz")
    series = ops_synthetic.series("cubic", "active", 40, np.random.default_rng(0))
    a, b = (ops_model.classify_detail(ops_model.load(path), series) for _ in range(2))
    assert a == b and a["classifier"] == "gnb" and a["k"] is None


def test_load_refuses_pickles_and_foreign_files(tmp_path, model):
    pickled = tmp_path / "p.npz"
    np.savez(pickled, X=model.X, y=model.y, meta=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ops_model.ModelError):
        ops_model.load(pickled)
    text = tmp_path / "t.npz"
    text.write_text("not a model")
    with pytest.raises(ops_model.ModelError, match="not a longhaul OPS model"):
        ops_model.load(text)
    with pytest.raises(ops_model.ModelError, match="no such"):
        ops_model.load(tmp_path / "absent.npz")


def test_load_checks_format_and_shapes(tmp_path, model):
    for change in ({"format": "other"}, {"w": 11}, {"classifier": "forest"}):
        meta = dict(model.meta, **change)
        bad = tmp_path / "bad.npz"
        np.savez(bad, X=model.X, y=model.y, meta=np.asarray(json.dumps(meta)))
        with pytest.raises(ops_model.ModelError):
            ops_model.load(bad)


def test_train_rejects_unknown_classifier(dataset):
    with pytest.raises(ValueError):
        ops_model.train(dataset, "passive", 10, "forest")


# ---- the commands ------------------------------------------------------------------------------

def _rtt_csv(path, values, header="t_s,rtt_ms"):
    lines = [header] if header else []
    for i, v in enumerate(values):
        lines.append(f"{i},{v:.3f}" if header == "t_s,rtt_ms" else f"{v:.3f}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("header", ["t_s,rtt_ms", "rtt_ms", None])
def test_train_then_classify_commands(dataset, tmp_path, capsys, header):
    model_path = tmp_path / "model.npz"
    assert main(["ops", "train", str(dataset.path), "--probing", "passive", "--w", "10",
                 "--classifier", "knn", "--k", "1", "--out", str(model_path)]) == 0
    capsys.readouterr()
    rtt = _rtt_csv(tmp_path / "rtt.csv", ops_synthetic.series("none", "passive", 20, np.random.default_rng(5)),
                   header)
    assert main(["ops", "classify", str(model_path), str(rtt), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["class"] == "none" and out["cca"] == "cubic" and out["w"] == 10
    assert main(["ops", "classify", str(model_path), str(rtt)]) == 0
    assert "foreground CCA: cubic" in capsys.readouterr().out


def test_classify_with_another_decision(dataset, tmp_path, capsys):
    model_path = ops_model.save(ops_model.train(dataset, "passive", 10), tmp_path / "m.npz")
    toml = tmp_path / "all-reno.toml"
    toml.write_text("[decision]\n[decision.map]\n" + "".join(f'{c} = "reno"\n' for c in ops_dataset.CLASSES))
    rtt = _rtt_csv(tmp_path / "r.csv", [130.0] * 12)
    assert main(["ops", "classify", str(model_path), str(rtt), "--json", "--decision", str(toml)]) == 0
    assert json.loads(capsys.readouterr().out)["cca"] == "reno"


@pytest.mark.parametrize("content, fragment", [
    ("t_s,rtt_ms\n0,130\n", "at least w=10"),
    ("t_s,rtt_ms\n0,abc\n", "positive RTT"),
    ("t_s,delay\n0,130\n", "rtt_ms column"),
    ("", "no RTT values"),
])
def test_classify_bad_csv_exit_2(model, tmp_path, capsys, content, fragment):
    model_path = ops_model.save(model, tmp_path / "m.npz")
    rtt = tmp_path / "r.csv"
    rtt.write_text(content)
    assert main(["ops", "classify", str(model_path), str(rtt)]) == 2
    assert fragment in capsys.readouterr().err


def test_classify_bad_model_exit_2(tmp_path, capsys):
    rtt = _rtt_csv(tmp_path / "r.csv", [130.0] * 12)
    assert main(["ops", "classify", str(rtt), str(rtt)]) == 2
    assert "not a longhaul OPS model" in capsys.readouterr().err
