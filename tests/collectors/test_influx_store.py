"""The InfluxDB store (collectors/store/influx/): the schema's lines, the spool, the settings, and
against a real influxd (Debian's 1.6.7 on loopback): export, read-back, preflight refusals,
rejected points and a server that never answers."""

from __future__ import annotations

import csv
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from influxd import InfluxServer, influx_server, needs_influxd

from longhaul.appliance.config.load import load_config
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.influx import points
from longhaul.collectors.store.influx.backfill import export_run, rebuild_spool, spooled_counts, stored_lines
from longhaul.collectors.store.influx.mirror import InfluxMirror, preflight
from longhaul.collectors.store.influx.readback import rebuild_run
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.influx.spool import REJECTED, SPOOL, ShipState, read_batch, spool_dir
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.records import TrialSummary, Verification
from longhaul.core.errors import ConfigError, PreflightError
from longhaul.core.tables import read_json

FIXTURE = Path(__file__).parents[1] / "data" / "run-v1" / "20261123-222341-a39045"
RUN_ID = FIXTURE.name
NO_CREDENTIAL = Credential(None, "$LONGHAUL_INFLUX_TOKEN")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "runs" / RUN_ID))


@pytest.fixture
def server(tmp_path):
    with influx_server(tmp_path / "influxd") as srv:
        yield srv


def settings_for(url: str, **kw) -> InfluxSettings:
    return InfluxSettings(url=url, database="longhaul", **kw)


# --- the schema -----------------------------------------------------------------------------------

def test_the_same_run_gives_the_same_lines():
    first, second = list(stored_lines(FIXTURE, [])), list(stored_lines(FIXTURE, []))
    assert first == second and len(first) > 500
    assert all("\n" not in line for line in first)


def test_a_trial_row_is_at_the_trial_start_plus_t_s():
    entry = load_store(FIXTURE).entries[0]
    trial = entry.trials[0]
    lines = list(points.trial_lines(load_store(FIXTURE).manifest, entry, trial,
                                    fmt.trial_dir(FIXTURE, entry.id, trial.trial), []))
    start = points.iso_ns(trial.started)
    first_rtt = next(line for line in lines if line.startswith(points.RTT + ","))
    # rtt.csv's first row: t_s -0.372
    assert first_rtt.endswith(f" {start - 372_000_000}")
    assert "mode=burst" in first_rtt and f"run={RUN_ID}" in first_rtt and "cell=quickstart-001" in first_rtt
    tput = next(line for line in lines if line.startswith(points.THROUGHPUT + ","))
    assert "tool=iperf3" in tput and "cca=cubic" in tput and "flow=fg" in tput
    tcpinfo = next(line for line in lines if line.startswith(points.TCPINFO + ","))
    assert "stream=0" in tcpinfo and "cwnd=10i" in tcpinfo and 'src="10.1.1.2"' in tcpinfo


def test_documents_survive_newlines_quotes_and_parts():
    text = 'a "quoted" \\ back\nslash\n' + "é" * 40_000
    lines = points.doc_lines({"run": "r"}, "config.toml", text, 1000)
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    parsed = []
    for k, line in enumerate(lines):
        assert f"part={k}i" in line and line.endswith(f" {1000 + k}")
        field = line.split("text=", 1)[1].rsplit(" ", 1)[0]
        value = field[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        parsed.append((k, value, 3))
    assert points.doc_text(parsed) == text


def test_a_row_that_does_not_parse_is_named():
    problems: list[str] = []
    rows = [{"t_s": "1.0", "rtt_ms": "2.5", "sent": "10", "received": "x", "mode": "idle"},
            {"t_s": "2.0", "rtt_ms": "", "sent": "10", "received": "0", "mode": "idle"}]
    lines = list(points.table_lines(fmt.RTT_CSV, rows, {"run": "r"}, 0, problems))
    assert problems == ["rtt.csv line 2: invalid literal for int() with base 10: 'x'"]
    assert len(lines) == 1 and "rtt_ms" not in lines[0] and "received=0i" in lines[0]


def test_read_batch_leaves_a_line_being_written(tmp_path):
    path = tmp_path / "s.lp"
    path.write_bytes(b"a 1\nb 2\nc 3\npartial")
    lines, end = read_batch(path, 0, 2)
    assert lines == ["a 1", "b 2"] and end == 8
    lines, end = read_batch(path, end, 10)
    assert lines == ["c 3"] and end == 12
    assert read_batch(path, end, 10) == ([], 12)


# --- settings ---------------------------------------------------------------------------------------

def _config(tmp_path: Path, influx: str) -> Path:
    path = tmp_path / "config.toml"
    (tmp_path / "profiles").mkdir(exist_ok=True)
    shutil.copy(Path(__file__).parents[2] / "profiles" / "quickstart.toml", tmp_path / "profiles")
    path.write_text(f'[store]\ndir = "runs"\ninflux = {influx}\n\n[run]\nprofiles = ["quickstart"]\n')
    return path


@pytest.mark.parametrize("influx, words", [
    ('{ url = "http://h:8086", database = "d", token = "secret" }', "credentials never go in config.toml"),
    ('{ url = "http://h:8086", database = "d", password = "x" }', "remove `password`"),
    ('{ url = "influx:8086", database = "d" }', "http:// or https:// URL"),
    ('{ url = "http://h:99999", database = "d" }', "port"),
    ('{ url = "http://h:8086" }', "exactly one of database"),
    ('{ url = "http://h:8086", database = "d", bucket = "b" }', "exactly one of database"),
    ('{ url = "http://h:8086", database = "d", credentials_file = "nope.txt" }', "cannot read the credential file"),
])
def test_a_bad_influx_table_exits_2_naming_the_line(tmp_path, influx, words):
    path = _config(tmp_path, influx)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert exc.value.exit_status == 2 and words in str(exc.value)
    assert f"{path}:3" in str(exc.value)


def test_the_credential_comes_from_the_file_or_the_environment(tmp_path, monkeypatch):
    (tmp_path / "influx.cred").write_text("alice:pw\n")
    config = load_config(_config(tmp_path, '{ url = "http://h:8086", database = "d", credentials_file = "influx.cred" }'))
    assert config.influx_credential.secret == "alice:pw"
    monkeypatch.setenv("LONGHAUL_INFLUX_TOKEN", "tok")
    config = load_config(_config(tmp_path, '{ url = "http://h:8086", bucket = "b", org = "o" }'))
    assert config.influx_credential.secret == "tok" and config.data.store.influx.api == "v2"
    assert "tok" not in (tmp_path / "config.toml").read_text()


# --- a real server ------------------------------------------------------------------------------------

@needs_influxd
def test_export_ships_every_point_once_and_the_report_reads_it_back(server, run_dir, tmp_path):
    target = preflight(settings_for(server.url), NO_CREDENTIAL)
    done = export_run(run_dir, target)
    assert done.rebuilt and done.report.rejected_lines == 0 and not done.problems
    expected = spooled_counts(run_dir)
    rows = sum(sum(1 for _ in csv.DictReader(p.open())) for p in run_dir.glob("cells/*/trial-*/tcpinfo.csv"))
    assert expected[points.TCPINFO] == rows
    counts = {m: sum(1 for _ in target.rows(m, {"run": RUN_ID})) for m in points.MEASUREMENTS}
    assert {m: n for m, n in counts.items() if n} == dict(expected)
    # again: nothing new is shipped, and a rebuild ships the same points over themselves
    assert export_run(run_dir, target).report.shipped_lines == 0
    export_run(run_dir, target, rebuild=True)
    assert {m: sum(1 for _ in target.rows(m, {"run": RUN_ID})) for m in expected} == dict(expected)

    back = rebuild_run(target, RUN_ID, tmp_path / "back")
    original, rebuilt = load_store(run_dir), load_store(back)
    assert rebuilt.manifest == original.manifest and rebuilt.entries == original.entries
    for entry in original.entries:
        a, b = original.trial_series(entry.id, 1), rebuilt.trial_series(entry.id, 1)
        assert a.throughput.keys() == b.throughput.keys()
        for flow in a.throughput:
            assert (a.throughput[flow][1] == b.throughput[flow][1]).all()
        assert (a.rtt[1] == b.rtt[1]).all() and a.srtt.keys() == b.srtt.keys()
        assert read_json(fmt.cell_dir(back, entry.id) / fmt.VERIFICATION) == \
            read_json(fmt.cell_dir(run_dir, entry.id) / fmt.VERIFICATION)
    target.close()


@needs_influxd
def test_preflight_names_what_is_wrong(server):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(PreflightError, match="cannot be reached: connection refused"):
        preflight(settings_for(f"http://127.0.0.1:{port}"), NO_CREDENTIAL)
    with pytest.raises(PreflightError, match="has no database 'nope'.*CREATE DATABASE"):
        preflight(InfluxSettings(url=server.url, database="nope"), NO_CREDENTIAL)


def test_preflight_refuses_a_missing_or_wrong_credential(tmp_path):
    if shutil.which("influxd") is None:
        pytest.skip("influxd not installed")
    srv = InfluxServer(tmp_path, auth=True).start()
    try:
        srv.query("CREATE USER admin WITH PASSWORD 'right' WITH ALL PRIVILEGES")
        srv.create_db("longhaul", user="admin", password="right")
        with pytest.raises(PreflightError, match="needs a credential and none was given.*LONGHAUL_INFLUX_TOKEN"):
            preflight(settings_for(srv.url), NO_CREDENTIAL)
        with pytest.raises(PreflightError, match="refused the credential from /etc/x"):
            preflight(settings_for(srv.url), Credential("admin:wrong", "/etc/x"))
        preflight(settings_for(srv.url), Credential("admin:right", "/etc/x")).close()
    finally:
        srv.stop()


@needs_influxd
def test_a_rejected_point_is_set_aside_with_the_reason_and_the_rest_shipped(server, run_dir):
    target = preflight(settings_for(server.url), NO_CREDENTIAL)
    # rtt_ms as a string in the run's shard: every lh_rtt point of the run now conflicts
    first = points.iso_ns(load_store(run_dir).entries[0].trials[0].started)
    target.write([f'{points.RTT},run=other rtt_ms="bad" {first}'])
    done = export_run(run_dir, target)
    expected = spooled_counts(run_dir)
    assert done.report.rejected_lines == expected[points.RTT]
    rejected = (spool_dir(run_dir) / REJECTED).read_text()
    assert "field type conflict" in rejected and rejected.count(f"\n{points.RTT},") + \
        rejected.startswith(points.RTT) == expected[points.RTT]
    assert sum(1 for _ in target.rows(points.TCPINFO, {"run": RUN_ID})) == expected[points.TCPINFO]
    assert ShipState(spool_dir(run_dir)).rejected == expected[points.RTT]


@needs_influxd
def test_a_server_that_never_answers_costs_the_run_nothing(server, run_dir, tmp_path):
    """A socket that accepts and never answers (as a frozen server): the mirror's calls return at
    once, the spool holds every point, and export ships them when a server answers."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        messages: list[str] = []
        settings = settings_for(url, timeout_s=1.0, drain_s=2.0)
        fresh = tmp_path / "fresh" / RUN_ID
        fresh.mkdir(parents=True)
        for name in (fmt.MANIFEST, fmt.SUMMARY, fmt.CONFIG_SNAPSHOT):
            shutil.copy(run_dir / name, fresh / name)
        shutil.copytree(run_dir / fmt.PROFILES_DIR, fresh / fmt.PROFILES_DIR)
        mirror = InfluxMirror(settings, NO_CREDENTIAL, fresh, say=messages.append)
        stored = load_store(run_dir)
        slowest = 0.0
        for entry in stored.entries:
            shutil.copytree(fmt.cell_dir(run_dir, entry.id), fmt.cell_dir(fresh, entry.id))
            for call, args in (("write_manifest", (stored.manifest,)), ("begin_cell", (entry,)),
                               ("record_verification", (entry, Verification.from_dict(entry.lab.to_dict()))),
                               *[("record_trial", (entry, TrialSummary.from_dict(t.to_dict()))) for t in entry.trials],
                               ("end_cell", (entry, "complete"))):
                began = time.monotonic()
                getattr(mirror, call)(*args)
                slowest = max(slowest, time.monotonic() - began)
        mirror.finish("complete")
        assert slowest < 0.05
        assert any("no answer within 1 s" in m for m in messages)
        assert any("`longhaul export" in m for m in messages)
        state = ShipState(spool_dir(fresh))
        assert state.complete and state.offset(spool_dir(fresh) / SPOOL) == 0
    finally:
        silent.close()
    target = preflight(settings_for(server.url), NO_CREDENTIAL)
    done = export_run(fresh, target)
    assert not done.rebuilt
    expected = spooled_counts(fresh)
    rebuild_spool(run_dir, [])           # the live spool holds what a back-fill of the files holds
    assert expected == spooled_counts(run_dir)
    assert {m: sum(1 for _ in target.rows(m, {"run": RUN_ID})) for m in expected} == dict(expected)



@needs_influxd
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs as a full disk needs root")
def test_a_full_spool_disk_is_named_and_export_ships_everything_later(server, run_dir, tmp_path):
    """The spool's directory on a 64 KiB tmpfs: the worker says the disk is full, the run's calls
    still return at once, and the spool is marked incomplete, so export rebuilds it from the files."""
    fresh = tmp_path / "fresh" / RUN_ID
    shutil.copytree(run_dir, fresh)
    influx_dir = spool_dir(fresh)
    influx_dir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "lh-test-spool", str(influx_dir)], check=True)
    try:
        messages: list[str] = []
        mirror = InfluxMirror(settings_for(server.url, drain_s=5), NO_CREDENTIAL, fresh, say=messages.append)
        stored = load_store(fresh)
        mirror.write_manifest(stored.manifest)
        for entry in stored.entries:
            for trial in entry.trials:
                mirror.record_trial(entry, trial)
        mirror.finish("complete")
        assert any("its disk is full" in m and "`longhaul export" in m for m in messages), messages
        assert not ShipState(influx_dir).complete
    finally:
        subprocess.run(["umount", str(influx_dir)], check=True)
    done = export_run(fresh, preflight(settings_for(server.url), NO_CREDENTIAL))
    assert done.rebuilt
    expected = spooled_counts(fresh)
    target = preflight(settings_for(server.url), NO_CREDENTIAL)
    assert {m: sum(1 for _ in target.rows(m, {"run": RUN_ID})) for m in expected} == dict(expected)
    target.close()


def test_a_number_the_json_holds_as_an_integer_is_still_a_float_field():
    """A trial whose duration or RTT came out whole must not become an integer field (a type
    conflict with every other trial's float)."""
    stored = load_store(FIXTURE)
    entry = stored.entries[0]
    trial = TrialSummary.from_dict({**entry.trials[0].to_dict(), "duration_s": 9, "jain": 1,
                                    "rtt": {**entry.trials[0].rtt.to_dict(), "median_ms": 20}})
    (line,) = [x for x in points.trial_lines(stored.manifest, entry, trial, Path("/nonexistent"), [])
               if x.startswith(points.TRIAL + ",")]
    for field, value in (("duration_s", "9"), ("jain", "1"), ("rtt_median_ms", "20")):
        assert re.search(rf"[ ,]{field}={value}[ ,]", line), (field, line)     # a float: no `i`


def test_a_config_asking_for_telegraf_where_there_is_none_is_refused_saying_how_to_get_it(tmp_path, monkeypatch):
    """[store] influx runs Telegraf on every lab host by default: on a machine with none (a stock
    Debian 12: no Go >= 1.25 to build it, no InfluxData package) the run is refused before anything
    is set up, at the key's line, exit 2; telegraf = false needs none."""
    from longhaul.appliance.run.preflight import check_telegraf
    from longhaul.collectors.live import telegraf
    monkeypatch.setattr(telegraf, "local_command", lambda: None)
    config = load_config(_config(tmp_path, '{ url = "http://h:8086", database = "d" }'))
    with pytest.raises(ConfigError) as exc:
        check_telegraf(config)
    assert exc.value.exit_status == 2
    text = str(exc.value)
    assert "config.toml:3: store.influx" in text and "InfluxData's telegraf package" in text, text
    check_telegraf(load_config(_config(tmp_path, '{ url = "http://h:8086", database = "d", telegraf = false }')))
    monkeypatch.setattr(telegraf, "local_command", lambda: "/usr/bin/telegraf")
    check_telegraf(config)
