"""The tidy trial table (store and CSV), traces, profile means, box statistics, shipped profiles."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from longhaul.appliance.config.profiles import load_profile
from longhaul.collectors.studies.throughput_profile.analysis import (
    Config,
    InputError,
    Trial,
    attach_traces,
    box_stats,
    build_profiles,
    capacity_of,
    load_trace,
    load_trials,
    read_trace,
    read_trials_csv,
)

DATA = Path(__file__).parents[1] / "data" / "profile"
PROFILES = Path(__file__).parents[2] / "profiles"


def _fake_run():
    spec = importlib.util.spec_from_file_location("fake_run", DATA / "fake_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_run = _fake_run()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---- CSV -----------------------------------------------------------------------------------------

def test_handmade_csv_reads_into_trials():
    trials = read_trials_csv(DATA / "handmade.csv")
    assert len(trials) == 27
    t = trials[0]
    assert (t.cca, t.streams, t.buffer, t.rtt_ms, t.repeat, t.mbps) == ("cubic", 1, "default", 10.0, 1, 890.0)
    assert t.trace is None and t.capacity_mbps is None


def test_csv_trace_column_is_relative_to_the_csv(tmp_path):
    _write(tmp_path / "t1.csv", "t_s,stream,mbps\n1,all,10\n1,0,4\n1,1,6\n2,all,12\n2,0,5\n2,1,7\n")
    csv_path = _write(tmp_path / "trials.csv", "cca,streams,buffer,rtt_ms,repeat,mbps,trace,capacity_mbps\n"
                                               "cubic,2,large,10,1,11,t1.csv,1000\n")
    (trial,) = read_trials_csv(csv_path)
    assert trial.trace == tmp_path / "t1.csv" and trial.capacity_mbps == 1000
    trace = load_trace(trial)
    assert list(trace.aggregate) == [10, 12]
    assert list(trace.streams) == ["0", "1"] and list(trace.streams["1"]) == [6, 7]


@pytest.mark.parametrize("body,line,fragment", [
    ("cca,streams,buffer,rtt_ms,repeat\n", 1, "missing column(s) mbps"),
    ("cca,streams,buffer,rtt_ms,repeat,mbps\ncubic,0,large,10,1,5\n", 2, "streams"),
    ("cca,streams,buffer,rtt_ms,repeat,mbps\ncubic,1,large,10,1,5\ncubic,1.5,large,10,1,5\n", 3, "streams"),
    ("cca,streams,buffer,rtt_ms,repeat,mbps\ncubic,1,large,ten,1,5\n", 2, "rtt_ms"),
    ("cca,streams,buffer,rtt_ms,repeat,mbps\ncubic,1,large,10,1,-5\n", 2, "mbps"),
    ("cca,streams,buffer,rtt_ms,repeat,mbps\n,1,large,10,1,5\n", 2, "cca"),
])
def test_bad_csv_names_file_line_and_column(tmp_path, body, line, fragment):
    path = _write(tmp_path / "bad.csv", body)
    with pytest.raises(InputError) as err:
        read_trials_csv(path)
    assert err.value.line == line
    assert fragment in str(err.value)
    assert str(path) in str(err.value)


def test_load_trials_refuses_missing_and_empty_sources(tmp_path):
    with pytest.raises(InputError):
        load_trials(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="no successful trials"):
        load_trials(_write(tmp_path / "empty.csv", "cca,streams,buffer,rtt_ms,repeat,mbps\n"))


def test_buffer_sizes_are_normalised():
    path = DATA / "handmade.csv"
    assert {t.buffer for t in read_trials_csv(path)} == {"default", "large"}
    from longhaul.collectors.studies.throughput_profile.analysis import normalise_buffer
    assert normalise_buffer("1e6") == normalise_buffer(1000000) == "1000000"
    assert normalise_buffer(" large ") == "large"


def test_long_trace_file_attaches_to_matching_trials(tmp_path):
    trials = read_trials_csv(DATA / "handmade.csv")
    traces = _write(tmp_path / "traces.csv", "cca,streams,buffer,rtt_ms,repeat,t_s,stream,mbps\n"
                                             "bbr,4,large,50,2,1,all,790\nbbr,4,large,50,2,2,all,810\n")
    joined = attach_traces(trials, traces)
    with_trace = [t for t in joined if t.trace is not None]
    assert len(with_trace) == 1
    assert (with_trace[0].cca, with_trace[0].rtt_ms, with_trace[0].repeat) == ("bbr", 50.0, 2)
    assert list(load_trace(with_trace[0]).aggregate) == [790, 810]


# ---- run store -------------------------------------------------------------------------------------

def test_store_gives_one_row_per_ok_trial(tmp_path):
    run = fake_run.make_run(tmp_path)
    trials = load_trials(run)
    cells = len(fake_run.RTTS) * len(fake_run.CCAS) * len(fake_run.STREAMS) * len(fake_run.BUFFERS)
    assert len(trials) == 2 * cells - 1  # one failed trial is not a measurement
    assert {t.buffer for t in trials} == set(fake_run.BUFFERS)
    assert {t.cca for t in trials} == set(fake_run.CCAS)
    assert {t.rtt_ms for t in trials} == set(fake_run.RTTS)
    assert all(t.capacity_mbps == fake_run.RATE and t.flow == "tcp" for t in trials)
    assert all(isinstance(t.trace, Path) and t.trace.is_file() for t in trials)
    trace = load_trace(trials[0])
    assert trace.aggregate.size == fake_run.DURATION
    assert np.mean(trace.aggregate) == pytest.approx(trials[0].mbps, rel=1e-3)


def test_unswept_buffer_comes_from_the_manifest(tmp_path):
    trials = load_trials(fake_run.make_run(tmp_path, buffer_swept=False))
    assert {t.buffer for t in trials} == {"normal"}


def test_background_flows_are_not_profiled(tmp_path):
    run = fake_run.make_run(tmp_path, failed=False)
    before = len(load_trials(run))
    summary = json.loads((run / "summary.json").read_text())
    for cell in summary["cells"]:
        for trial in cell["trials"]:
            trial["flows"].append({"name": "bg", "role": "background", "protocol": "tcp", "cca": "bbr",
                                   "streams": 1, "mean_mbps": 12.0})
    (run / "summary.json").write_text(json.dumps(summary))
    assert len(load_trials(run)) == before


def test_trace_reader_keeps_only_the_flow_asked_for(tmp_path):
    path = _write(tmp_path / "throughput.csv", "t_s,flow,stream,mbps\n1,fg,0,3\n1,bg,0,99\n2,fg,0,5\n2,bg,0,98\n3,fg,0,\n2,fg")
    trace = read_trace(path, "fg")
    assert list(trace.aggregate) == [3, 5]  # no "all" rows: the aggregate is the streams' sum
    assert load_trace(Trial("cubic", 1, "large", 1.0, 1, 4.0, trace=tmp_path / "gone.csv")) is None


# ---- profiles and box statistics -------------------------------------------------------------------

def test_profile_means_std_and_counts():
    profiles = build_profiles(read_trials_csv(DATA / "handmade.csv"))
    assert list(profiles) == [Config("bbr", 4, "large"), Config("cubic", 1, "default"), Config("cubic", 4, "large")]
    p = profiles[Config("cubic", 1, "default")]
    assert list(p.rtt_ms) == [10, 50, 100]
    assert list(p.mean) == [900, 300, 100]
    assert list(p.std) == pytest.approx([10, 10, 10])
    assert list(p.n) == [3, 3, 3]


def test_box_stats_known_answer():
    box = box_stats([1, 2, 3, 4, 5, 6, 7, 8, 9, 100])
    assert (box["q1"], box["median"], box["q3"]) == pytest.approx((3.25, 5.5, 7.75))
    assert box["whisker_low"] == 1 and box["whisker_high"] == 9
    assert box["outliers"] == [100]
    assert box["n"] == 10 and box["mean"] == pytest.approx(14.5)
    assert box_stats([]) == {"n": 0}


def test_capacity_precedence():
    trials = [Trial("cubic", 1, "large", 1.0, 1, 700.0, capacity_mbps=1000.0)]
    profiles = build_profiles(trials)
    assert capacity_of(trials, profiles, 5000.0) == 5000.0
    assert capacity_of(trials, profiles) == 1000.0
    bare = [Trial("cubic", 1, "large", 1.0, 1, 700.0)]
    assert capacity_of(bare, build_profiles(bare)) == 700.0


# ---- shipped profiles --------------------------------------------------------------------------------

def test_full_profile_is_the_papers_sweep():
    p = load_profile(PROFILES / "rao-throughput-profile.toml")
    assert len(p.cells) * p.meta.repeats == 6300
    rtts = sorted({c.cell.topology.rtt_ms for c in p.cells})
    assert rtts == [0.4, 11.8, 22.6, 45.6, 91.6, 183, 366]
    assert {c.cell.flows[0].streams for c in p.cells} == set(range(1, 11))
    assert {c.cell.tuning.buffer for c in p.cells} == {"default", "normal", "large"}
    assert all(c.cell.flows[0].duration_s == 100 for c in p.cells)
    assert all(c.cell.topology.bottleneck_rate_mbps == 1000 for c in p.cells)


def test_quick_profile_fits_in_about_ten_minutes():
    p = load_profile(PROFILES / "rao-throughput-profile-quick.toml")
    seconds = sum(p.meta.repeats * (c.cell.flows[0].duration_s + 10) for c in p.cells)
    assert seconds <= 600
    assert len({c.cell.topology.rtt_ms for c in p.cells}) >= 3  # the report section needs 3 RTTs
    assert all("flows.tcp.streams" in c.params and "tuning.buffer" in c.params for c in p.cells)


def test_tidy_table_round_trips_through_csv(tmp_path):
    from longhaul.collectors.studies.throughput_profile.analysis import write_trials_csv
    trials = load_trials(fake_run.make_run(tmp_path))
    back = read_trials_csv(write_trials_csv(trials, tmp_path / "export.csv"))
    assert [(t.cca, t.streams, t.buffer, t.rtt_ms, t.repeat, t.trace, t.capacity_mbps) for t in back] == \
        [(t.cca, t.streams, t.buffer, t.rtt_ms, t.repeat, t.trace, t.capacity_mbps) for t in trials]
    assert [t.mbps for t in back] == pytest.approx([t.mbps for t in trials], rel=1e-5)


def test_a_flows_own_buffer_wins_over_the_hosts(tmp_path):
    run = fake_run.make_run(tmp_path, buffer_swept=False)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["cells"][0]["cell"]["flows"][0]["buffer"] = 4_000_000  # as schema.Cell.flow_buffer
    (run / "manifest.json").write_text(json.dumps(manifest))
    by_cell = {t.trace.parent.parent.name: t.buffer for t in load_trials(run)}
    assert by_cell[manifest["cells"][0]["id"]] == "4000000"
    assert by_cell[manifest["cells"][1]["id"]] == "normal"


# ---- the shared analysis (study.analyse: the CLI's and the report section's) -------------------------

def test_analyse_gathers_profiles_fits_and_dynamics(tmp_path):
    from longhaul.collectors.studies.throughput_profile.study import analyse
    trials = load_trials(fake_run.make_run(tmp_path))
    result = analyse(trials)
    assert result.rtts_ms == sorted(fake_run.RTTS)
    assert list(result.profiles) == list(build_profiles(trials))
    assert (result.capacity_mbps, result.capacity_source) == (fake_run.RATE, "bottleneck rate")
    assert set(result.fits) == set(result.profiles)
    assert len(result.traces) == len(trials) and result.missing_traces == 0
    given = analyse(trials, capacity_mbps=5000.0, dynamics=False)
    assert (given.capacity_mbps, given.capacity_source, given.traces) == (5000.0, "given", None)
    bare = [Trial("cubic", 1, "large", r, 1, 700.0 - r) for r in (1.0, 2.0, 3.0)]
    assert analyse(bare, dynamics=False).capacity_source == "best profile mean"
