"""Sweep expansion: list values become axes, cells are their cartesian product, per scenario."""
from __future__ import annotations

from pathlib import Path

import pytest

from longhaul.appliance.config.profiles import load_profile

BASE = """\
[topology]
pairs = 2
rtt_ms = {rtt}

[[flows]]
name = "fg"
role = "foreground"
pair = 1
duration_s = 40

[[flows]]
name = "bg"
role = "background"
pair = 2
start_s = 5
duration_s = 20
cca = {bg_cca}
"""


def profile(tmp_path: Path, extra: str = "", rtt="128", bg_cca='"cubic"', head: str = "", name: str = "study"):
    path = tmp_path / f"{name}.toml"
    path.write_text(head + BASE.format(rtt=rtt, bg_cca=bg_cca) + extra)
    return load_profile(path)


def test_no_lists_one_cell(tmp_path):
    prof = profile(tmp_path)
    assert len(prof.cells) == 1
    spec = prof.cells[0]
    assert (spec.id, spec.profile, spec.scenario, spec.params) == ("study-001", "study", "base", {"scenario": "base"})
    assert spec.labels == {} and spec.reference is None


def test_cartesian_product(tmp_path):
    prof = profile(tmp_path, rtt="[10, 20, 40]", bg_cca='["cubic", "bbr"]')
    assert len(prof.cells) == 6
    assert [c.id for c in prof.cells] == [f"study-{i:03d}" for i in range(1, 7)]
    seen = set()
    for spec in prof.cells:
        assert set(spec.params) == {"scenario", "topology.rtt_ms", "flows.bg.cca"}
        assert spec.params["scenario"] == "base"
        # the params describe the cell that was built
        assert spec.cell.topology.rtt_ms == spec.params["topology.rtt_ms"]
        bg = next(f for f in spec.cell.flows if f.name == "bg")
        assert bg.cca == spec.params["flows.bg.cca"]
        assert spec.cell.flows[0].cca is None  # the other flow is untouched
        seen.add((spec.params["topology.rtt_ms"], spec.params["flows.bg.cca"]))
    assert seen == {(r, c) for r in (10, 20, 40) for c in ("cubic", "bbr")}


def test_axis_order_sections_then_flows(tmp_path):
    prof = profile(tmp_path, rtt="[10, 20]", bg_cca='["cubic", "bbr"]', extra="")
    order = [(c.params["topology.rtt_ms"], c.params["flows.bg.cca"]) for c in prof.cells]
    assert order == [(10, "cubic"), (10, "bbr"), (20, "cubic"), (20, "bbr")]


@pytest.mark.parametrize("section, key, values, attr", [
    ("tuning", "cca", '["cubic", "reno"]', ("tuning", "cca")),
    ("tuning", "buffer", '["default", "normal", 1048576]', ("tuning", "buffer")),
    ("probe", "mode", '["burst", "interval"]', ("probe", "mode")),
])
def test_lists_in_other_sections(tmp_path, section, key, values, attr):
    prof = profile(tmp_path, extra=f"\n[{section}]\n{key} = {values}\n")
    n = values.count(",") + 1
    assert len(prof.cells) == n
    got = [getattr(getattr(c.cell, attr[0]), attr[1]) for c in prof.cells]
    assert got == [c.params[f"{section}.{key}"] for c in prof.cells]
    assert len(set(map(str, got))) == n


def test_flow_list_axis_several_keys(tmp_path):
    prof = profile(tmp_path, extra="streams = [1, 4]\n", bg_cca='["cubic", "bbr", "reno"]')
    assert len(prof.cells) == 6
    assert {(c.params["flows.bg.cca"], c.params["flows.bg.streams"]) for c in prof.cells} == \
        {(a, s) for a in ("cubic", "bbr", "reno") for s in (1, 4)}


SCENARIOS = """
[[scenarios]]
name = "alone"
flows = ["fg"]
column = "dedicated-1"
mode = "dedicated"

[[scenarios]]
name = "shared"
column = "shared-1"
mode = "shared"
reference = { fg = 415, bg = 75.6 }
reference_source = "seed 000 Table 2"
"""


def test_scenarios_multiply_with_sweeps(tmp_path):
    prof = profile(tmp_path, rtt="[10, 20, 40]", extra=SCENARIOS)
    assert [c.scenario for c in prof.cells] == ["alone"] * 3 + ["shared"] * 3
    assert [c.id for c in prof.cells] == [f"study-{i:03d}" for i in range(1, 7)]
    assert [c.params["topology.rtt_ms"] for c in prof.cells] == [10, 20, 40] * 2
    assert all(c.params["scenario"] == c.scenario for c in prof.cells)


def test_scenario_flow_subset(tmp_path):
    prof = profile(tmp_path, extra=SCENARIOS)
    alone, shared = prof.cells
    assert [f.name for f in alone.cell.flows] == ["fg"]
    assert [f.name for f in shared.cell.flows] == ["fg", "bg"]


def test_sweep_of_excluded_flow_is_not_an_axis(tmp_path):
    prof = profile(tmp_path, bg_cca='["cubic", "bbr"]', extra=SCENARIOS)
    assert [c.scenario for c in prof.cells] == ["alone", "shared", "shared"]
    assert prof.cells[0].params == {"scenario": "alone"}
    assert [c.params["flows.bg.cca"] for c in prof.cells[1:]] == ["cubic", "bbr"]


def test_labels_and_reference_carried(tmp_path):
    prof = profile(tmp_path, extra=SCENARIOS)
    alone, shared = prof.cells
    assert alone.labels == {"column": "dedicated-1", "mode": "dedicated"}
    assert alone.reference is None
    assert shared.labels == {"column": "shared-1", "mode": "shared"}
    assert shared.reference == {"source": "seed 000 Table 2", "values": {"fg": 415.0, "bg": 75.6}}


def test_label_only_column(tmp_path):
    prof = profile(tmp_path, extra='\n[[scenarios]]\nname = "x"\ncolumn = "c"\n')
    assert prof.cells[0].labels == {"column": "c"}


@pytest.mark.parametrize("key, value, check", [
    ("topology.rtt_ms", "64", lambda c: c.topology.rtt_ms == 64),
    ("tuning.cca", '"bbr"', lambda c: c.tuning.cca == "bbr" and c.flow_cca(c.flows[0]) == "bbr"),
    ("probe.mode", '"interval"', lambda c: c.probe.mode == "interval"),
    ("flows.bg.cca", '"reno"', lambda c: c.flows[1].cca == "reno"),
    ("flows.fg.streams", "8", lambda c: c.flows[0].streams == 8),
])
def test_scenario_set_overrides(tmp_path, key, value, check):
    prof = profile(tmp_path, extra=f'\n[[scenarios]]\nname = "x"\nset = {{ "{key}" = {value} }}\n')
    assert len(prof.cells) == 1 and check(prof.cells[0].cell)
    assert prof.cells[0].params == {"scenario": "x"}  # a scalar override is not an axis


def test_set_overrides_only_its_scenario(tmp_path):
    extra = ('\n[[scenarios]]\nname = "cubic"\n'
             '\n[[scenarios]]\nname = "bbr"\nset = { "flows.bg.cca" = "bbr", "topology.rtt_ms" = 20 }\n')
    cubic, bbr = profile(tmp_path, extra=extra).cells
    assert (cubic.cell.flows[1].cca, cubic.cell.topology.rtt_ms) == ("cubic", 128)
    assert (bbr.cell.flows[1].cca, bbr.cell.topology.rtt_ms) == ("bbr", 20)


def test_set_replaces_a_sweep(tmp_path):
    extra = '\n[[scenarios]]\nname = "fixed"\nset = { "topology.rtt_ms" = 50 }\n\n[[scenarios]]\nname = "swept"\n'
    prof = profile(tmp_path, rtt="[10, 20]", extra=extra)
    assert [(c.scenario, c.cell.topology.rtt_ms) for c in prof.cells] == \
        [("fixed", 50), ("swept", 10), ("swept", 20)]


@pytest.mark.parametrize("key, values, param", [
    ("topology.rtt_ms", "[10, 20, 40]", "topology.rtt_ms"),
    ("flows.bg.cca", '["bbr", "reno"]', "flows.bg.cca"),
])
def test_set_list_becomes_axis(tmp_path, key, values, param):
    prof = profile(tmp_path, extra=f'\n[[scenarios]]\nname = "x"\nset = {{ "{key}" = {values} }}\n')
    expected = [v.strip().strip('"') for v in values.strip("[]").split(",")]
    assert [str(c.params[param]) for c in prof.cells] == expected
    assert all(set(c.params) == {"scenario", param} for c in prof.cells)


def test_set_axis_times_file_axis(tmp_path):
    prof = profile(tmp_path, bg_cca='["cubic", "bbr"]',
                   extra='\n[[scenarios]]\nname = "x"\nset = { "topology.rtt_ms" = [10, 20] }\n')
    assert len(prof.cells) == 4
    assert {(c.params["topology.rtt_ms"], c.params["flows.bg.cca"]) for c in prof.cells} == \
        {(10, "cubic"), (10, "bbr"), (20, "cubic"), (20, "bbr")}


def test_default_repeats_and_meta(tmp_path):
    prof = profile(tmp_path)
    assert prof.meta.repeats == 3 and prof.meta.time_scale == 1.0
    prof = profile(tmp_path, head='[profile]\ndescription = "d"\nrepeats = 5\n\n', name="other")
    assert prof.meta.repeats == 5 and prof.meta.description == "d" and prof.name == "other"
    assert prof.source_text.startswith("[profile]")


def test_time_scale_scales_duration_only(tmp_path):
    head = "[profile]\ntime_scale = 0.5\n\n"
    extra = ('\n[[flows]]\nname = "sq"\nrole = "background"\npattern = "square"\non_s = 4\noff_s = 2\n'
             'start_s = 3\nduration_s = 30\n'
             '\n[[flows]]\nname = "n"\nrole = "background"\nbytes = 1000000\n')
    prof = profile(tmp_path, head=head, extra=extra)
    fg, bg, sq, by = prof.cells[0].cell.flows
    assert (fg.duration_s, bg.duration_s, sq.duration_s) == (20.0, 10.0, 15.0)
    assert (bg.start_s, sq.start_s, sq.on_s, sq.off_s) == (5.0, 3.0, 4.0, 2.0)
    assert by.bytes == 1_000_000 and by.duration_s is None


def test_cell_ids_run_across_scenarios(tmp_path):
    extra = '\n[[scenarios]]\nname = "a"\n\n[[scenarios]]\nname = "b"\nset = { "flows.fg.streams" = [1, 2] }\n'
    prof = profile(tmp_path, rtt="[10, 20]", extra=extra, name="ids")
    assert [c.id for c in prof.cells] == [f"ids-{i:03d}" for i in range(1, 7)]
    assert [c.scenario for c in prof.cells] == ["a", "a", "b", "b", "b", "b"]
