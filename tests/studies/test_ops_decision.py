"""The Figure 12 decision model as a validated TOML mapping."""
from __future__ import annotations

import pytest

from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.collectors.studies.ops import decision as ops_decision
from longhaul.core.errors import ConfigError


def test_shipped_file_is_figure_12():
    decision = ops_decision.load()
    assert decision.mapping == ops_decision.rule_mapping()
    assert decision.mapping == {"none": "cubic", "cubic": "cubic", "cubic2": "cubic",
                                "bbr": "bbr", "bbr2": "bbr", "cubic_bbr": "bbr"}
    assert decision.decide("cubic_bbr") == "bbr" and decision.decide("cubic2") == "cubic"
    assert ops_decision.default().mapping == decision.mapping


def test_rule_follows_the_class_definitions():
    classes = {"three": {"flows": [["S1", "cubic"], ["S2", "cubic"], ["S5", "bbr"]]}, "idle": {"flows": []}}
    assert ops_decision.rule_mapping(classes) == {"three": "bbr", "idle": "cubic"}


def _toml(tmp_path, body):
    path = tmp_path / "d.toml"
    path.write_text(body)
    return path


def _full_map(**override):
    m = dict(ops_decision.rule_mapping(), **override)
    return "[decision]\n[decision.map]\n" + "".join(f'{k} = "{v}"\n' for k, v in m.items())


@pytest.mark.parametrize("body, key, fragment", [
    (_full_map(cubic="quic"), ("decision", "map", "cubic"), "a congestion control"),
    (_full_map() + 'udp = "cubic"\n', ("decision", "map", "udp"), "unknown class"),
    ("[decision]\n[decision.map]\ncubic = \"cubic\"\n", ("decision", "map"), "missing"),
    ("[decision]\ndescription = 1\n[decision.map]\n", ("decision", "description"), "a string"),
    ("[decision]\nrule = \"x\"\n[decision.map]\n", ("decision", "rule"), "allowed keys"),
    ("[other]\n", ("other",), "only a [decision] table"),
    ("[decision]\n", ("decision", "map"), "[decision.map]"),
])
def test_invalid_mappings_are_config_errors(tmp_path, body, key, fragment):
    with pytest.raises(ConfigError) as err:
        ops_decision.load(_toml(tmp_path, body))
    assert err.value.keypath == key and fragment in str(err.value)
    assert err.value.exit_status == 2


def test_error_names_the_line(tmp_path):
    path = _toml(tmp_path, _full_map(bbr2="bbbr"))
    with pytest.raises(ConfigError) as err:
        ops_decision.load(path)
    assert err.value.line == 1 + 1 + list(ops_dataset.CLASSES).index("bbr2") + 1
    assert str(path) in str(err.value)


def test_other_class_sets(tmp_path):
    path = _toml(tmp_path, '[decision]\n[decision.map]\nidle = "cubic"\nbusy = "bbr"\n')
    assert ops_decision.load(path, ["idle", "busy"]).decide("busy") == "bbr"
    with pytest.raises(ValueError):
        ops_decision.load(path, ["idle", "busy"]).decide("cubic")


def test_round_trip_through_dict():
    d = ops_decision.default()
    assert ops_decision.from_dict(d.to_dict()) == d


def test_names_the_ops_run_command_uses():
    assert ops_decision.default().decide("bbr2") == "bbr"
