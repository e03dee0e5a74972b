"""`longhaul analyze profile`, `longhaul advise` and the report's throughput-profile section."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import report_fixtures

from longhaul.appliance.cli.app import main
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.studies.throughput_profile import section as profile_section
from longhaul.collectors.studies.throughput_profile import study
from longhaul.collectors.studies.throughput_profile.paper import paper_tau_t
from longhaul.reports.render import render_section

TESTS = Path(__file__).parents[1]
DATA = TESTS / "data" / "profile"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_run = _load("fake_run", DATA / "fake_run.py")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return fake_run.make_run(tmp_path_factory.mktemp("profile-run"))


@pytest.fixture
def csv_with_traces(tmp_path):
    """The hand-made table plus one long trace file covering every trial."""
    csv_path = tmp_path / "trials.csv"
    shutil.copy(DATA / "handmade.csv", csv_path)
    rng = np.random.default_rng(7)
    lines = ["cca,streams,buffer,rtt_ms,repeat,t_s,stream,mbps"]
    for row in csv_path.read_text().splitlines()[1:]:
        cca, streams, buffer, rtt, repeat, mbps = row.split(",")
        for t in range(1, 31):
            lines.append(f"{cca},{streams},{buffer},{rtt},{repeat},{t},all,{float(mbps) + rng.normal(0, 20):.3f}")
    traces = tmp_path / "traces.csv"
    traces.write_text("\n".join(lines) + "\n")
    return csv_path, traces


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_analyze_csv_json(capsys, csv_with_traces):
    csv_path, traces = csv_with_traces
    doc = _json(capsys, ["analyze", "profile", str(csv_path), "--traces", str(traces), "--json"])
    assert doc["format"] == "longhaul-profile-analysis" and doc["trials"] == 27
    assert doc["rtts_ms"] == [10, 50, 100]
    assert doc["capacity_source"] == "best profile mean" and doc["capacity_mbps"] == 900
    assert len(doc["profiles"]) == 3 and len(doc["transitions"]) == 3
    point = doc["profiles"][0]["points"][0]
    assert {"rtt_ms", "mean_mbps", "std_mbps", "n", "box"} <= set(point)
    assert {"tau_t_ms", "kind", "concave", "convex"} <= set(doc["transitions"][0])
    dyn = doc["dynamics"]
    assert dyn["traces"] == 27 and dyn["missing"] == 0
    assert len(dyn["per_trace"]) == 27 and len(dyn["per_cell"]) == 9
    assert all(isinstance(t["lyapunov"], float) for t in dyn["per_trace"])


def test_analyze_run_dir_json_and_tables(capsys, run_dir):
    doc = _json(capsys, ["analyze", "profile", str(run_dir), "--json", "--capacity", "1000"])
    assert doc["trials"] == 63 and doc["capacity_source"] == "given"
    assert doc["dynamics"]["traces"] == 63
    fits = {(t["cca"], t["streams"], t["buffer"]): t for t in doc["transitions"]}
    # the model behind the fake run: a small default buffer turns convex early, large buffers don't
    assert fits[("cubic", 1, "default")]["tau_t_ms"] < fits[("cubic", 1, "large")]["tau_t_ms"]
    assert main(["analyze", "profile", str(run_dir), "--no-dynamics"]) == 0
    out = capsys.readouterr().out
    assert "throughput profiles" in out and "transition RTT" in out and "dynamics" not in out


def test_advise_rtt_json_gives_the_obvious_answer(capsys):
    doc = _json(capsys, ["advise", "--rtt", "30", "--from", str(DATA / "handmade.csv"), "--json"])
    assert (doc["cca"], doc["streams"], doc["buffer"]) == ("cubic", 4, "large")
    assert doc["expected_mbps"] == pytest.approx(830)
    assert doc["rtt_ms"] == 30 and doc["rtt_source"] == "given" and doc["in_range"] is True
    assert doc["runner_up"]["cca"] == "bbr"
    assert "confidence interval" in doc["confidence"]


def test_advise_filters_and_human_output(capsys):
    assert main(["advise", "--rtt", "10", "--from", str(DATA / "handmade.csv"), "--cca", "bbr"]) == 0
    out = capsys.readouterr().out
    assert "bbr / 4 / large" in out and "850" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="ICMP echo from a raw socket needs root")
def test_advise_to_host_measures_the_rtt(capsys, run_dir):
    doc = _json(capsys, ["advise", "--to", "127.0.0.1", "--from", str(run_dir), "--json"])
    assert doc["rtt_source"] == "measured" and doc["target"] == "127.0.0.1"
    assert 0 <= doc["rtt_ms"] < 5
    assert {"cca", "streams", "buffer", "expected_mbps"} <= set(doc)


@pytest.mark.parametrize("argv,fragment", [
    (["analyze", "profile", "{tmp}/missing.csv"], "no such run directory"),
    (["analyze", "profile", "{tmp}/bad.csv"], "bad.csv:2"),
    (["analyze", "profile", "{data}/handmade.csv", "--capacity", "0"], "--capacity"),
    (["advise", "--rtt", "-3", "--from", "{data}/handmade.csv"], "--rtt"),
    (["advise", "--rtt", "10", "--from", "{data}/handmade.csv", "--cca", "htcp"], "no measured configuration"),
    (["advise", "--rtt", "10", "--from", "{tmp}"], "summary.json"),
])
def test_bad_input_exits_2_with_a_message(capsys, tmp_path, argv, fragment):
    (tmp_path / "bad.csv").write_text("cca,streams,buffer,rtt_ms,repeat,mbps\ncubic,x,large,10,1,5\n")
    argv = [a.format(tmp=tmp_path, data=DATA) for a in argv]
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_advise_needs_an_rtt_or_a_host(capsys):
    assert main(["advise", "--from", str(DATA / "handmade.csv")]) == 2
    assert main(["advise", "--rtt", "1", "--to", "127.0.0.1", "--from", "x.csv"]) == 2


def test_one_repeat_prints_no_spread(capsys, tmp_path):
    csv_path = tmp_path / "one.csv"
    csv_path.write_text("cca,streams,buffer,rtt_ms,repeat,mbps\n" + "".join(
        f"cubic,1,large,{rtt},{k},{mbps}\n" for rtt, mbps, ks in ((10, 900, (1, 2)), (50, 500, (1,)), (100, 100, (1,)))
        for k in ks))
    assert main(["analyze", "profile", str(csv_path), "--no-dynamics"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"│ +900 ± 0 +│ +500 +│ +100 +│", out), out  # one repeat at 50 and 100 ms: no "± 0"


# ---- report section ------------------------------------------------------------------------------

def _section(run) -> str | None:
    """The section's HTML as the report places it (None: the section does not apply)."""
    return render_section(profile_section.SECTION, load_store(run))


def test_report_section_shows_every_part(run_dir):
    html = _section(run_dir)
    assert html.startswith('<section id="throughput-profile">') and "<h2>" in html
    for heading in ("Profiles", "Transition RTT", "Dynamics", "Transport selection"):
        assert f"<h3>{heading}</h3>" in html
    n_cca = len(fake_run.CCAS)
    # per variant: profile, box, sigmoid fit, Poincare, Lyapunov; then tauT and throughput vs exponent
    assert html.count("<svg") == 5 * n_cca + 2
    for title in ("Throughput profile: cubic", "Throughput box plots: bbr", "Sigmoid fits and transition RTT",
                  "Poincaré maps: cubic", "Lyapunov exponents: bbr", "Throughput vs Lyapunov exponent"):
        assert title in html
    selection = re.search(r"<table class='selection'>.*?</table>", html, re.S).group(0)
    assert selection.count("<tr>") == 1 + 7  # header + 4 measured RTTs + 3 midpoints
    assert "1000 Mb/s" in html


def test_report_section_absent_without_an_rtt_sweep(tmp_path):
    make_store = report_fixtures.make_store
    assert _section(make_store(tmp_path)) is None


def test_report_section_without_traces_keeps_profiles_and_selection(tmp_path):
    run = fake_run.make_run(tmp_path)
    for trace in run.glob("cells/*/trial-*/throughput.csv"):
        trace.unlink()
    html = _section(run)
    assert "<h3>Profiles</h3>" in html and "<h3>Transport selection</h3>" in html
    assert "<h3>Dynamics</h3>" not in html
    assert html.count("<svg") == 3 * len(fake_run.CCAS) + 1


def test_section_and_cli_read_one_analysis(capsys, run_dir, monkeypatch):
    """Both call study.analyse, and the section's tauT table shows the CLI's transitions."""
    calls = []
    real = study.analyse
    monkeypatch.setattr(study, "analyse", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(profile_section, "analyse", study.analyse)
    doc = _json(capsys, ["analyze", "profile", str(run_dir), "--json", "--no-dynamics"])
    html = _section(run_dir)
    assert len(calls) == 2
    tau = re.search(r"<table class='tau'>.*?</table>", html, re.S).group(0)
    shown = {tuple(re.findall(r"<td>(.*?)</td>", row)): re.findall(r"<td class='num'>(.*?)</td>", row)
             for row in re.findall(r"<tr><td>.*?</tr>", tau)}
    streams = sorted({t["streams"] for t in doc["transitions"]})
    for t in doc["transitions"]:
        mark = {"concave": "≥ ", "convex": "≤ "}.get(t["kind"], "")
        ours, _, paper = shown[(t["cca"], t["buffer"])][streams.index(t["streams"])].partition(" (")
        assert ours == f"{mark}{t['tau_t_ms']:g}"
        given = paper_tau_t(t["cca"], t["buffer"], t["streams"])       # seed 001's text, beside ours
        assert paper == ("" if given is None else f"{given:g})")
    assert any(paper_tau_t(t["cca"], t["buffer"], t["streams"]) for t in doc["transitions"])


def test_section_escapes_stored_names(tmp_path):
    run = fake_run.make_run(tmp_path, buffer_swept=False)
    manifest = json.loads((run / "manifest.json").read_text())
    for cell in manifest["cells"]:
        cell["cell"]["tuning"]["buffer"] = "<script>alert(1)</script>"
    (run / "manifest.json").write_text(json.dumps(manifest))
    html = _section(run)
    assert "<script>" not in html
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in html           # the tauT table
    assert "Shown for the &lt;script&gt;alert(1)&lt;/script&gt; buffer" in html  # dynamics


def test_failed_analysis_is_a_note(tmp_path, monkeypatch):
    run = fake_run.make_run(tmp_path)
    monkeypatch.setattr(profile_section, "analyse", lambda trials: 1 / 0)
    html = _section(run)
    assert '<p class="missing">The throughput-profile analysis failed: division by zero</p>' in html
