"""A whole run with `[store] influx` on the fake lab (tests/support/fakes.py) against a real influxd: the
database ends up with exactly the points of the run's files; a wrong database stops the run
before anything is built; `longhaul export` and `longhaul report --from-influx` end to end."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from fake_lab import FakePath
from fakes import FakeBackend, use_fake_backend, write_fake_config
from influxd import influx_server
from rich.console import Console

from longhaul.appliance.cli import app
from longhaul.appliance.cli.progress import Progress
from longhaul.appliance.config.load import load_config
from longhaul.appliance.run.runner import Runner
from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.influx import points
from longhaul.collectors.store.influx.backfill import rebuild_spool, spooled_counts
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.influx.spool import ShipState, spool_dir
from longhaul.collectors.store.influx.targets import V1Target
from longhaul.collectors.store.reader import load_store
from longhaul.collectors.store.writer import FileRunWriter
from longhaul.core.errors import PreflightError

pytestmark = pytest.mark.timeout(180)

FIXTURE = Path(__file__).parents[1] / "data" / "run-v1" / "20261123-222341-a39045"


@pytest.fixture
def server(tmp_path):
    with influx_server(tmp_path / "influxd") as srv:
        yield srv


def influx_config(tmp_path: Path, url: str, database: str = "longhaul") -> Path:
    config = write_fake_config(tmp_path)
    config.write_text(config.read_text().replace(
        '[store]\ndir = "runs"\n',
        f'[store]\ndir = "runs"\ninflux = {{ url = "{url}", database = "{database}", telegraf = false }}\n'))
    return config


def db_counts(url: str, run_id: str, names) -> dict[str, int]:
    target = V1Target(InfluxSettings(url=url, database="longhaul"), Credential(None, "-"))
    try:
        return {m: sum(1 for _ in target.rows(m, {"run": run_id})) for m in names}
    finally:
        target.close()


def test_a_run_puts_exactly_its_files_points_in_the_database(tmp_path, monkeypatch, server):
    use_fake_backend(monkeypatch, FakeBackend())
    config = load_config(influx_config(tmp_path, server.url))
    store = Runner(config, Progress(Console(file=io.StringIO()), live=False)).run()
    live = spooled_counts(store.dir)
    state = ShipState(spool_dir(store.dir))
    assert state.complete and state.unshipped_bytes(spool_dir(store.dir)) == 0
    assert {points.THROUGHPUT, points.RTT, points.TCPINFO, points.TRIAL, points.FLOW, points.CELL,
            points.VERIFICATION, points.RUN, points.DOC} <= set(live)
    assert db_counts(server.url, store.run_id, live) == dict(live)
    # what the files hold, re-derived: the same points (a back-fill would overwrite, not add)
    copy = Path(shutil.copytree(store.dir, tmp_path / "copy" / store.run_id))
    rebuild_spool(copy, [])
    assert spooled_counts(copy) == live
    assert db_counts(server.url, store.run_id, live) == dict(live)
    assert app.main(["report", str(store.dir), "--format", "html"]) == 0
    assert f"to {server.url} database longhaul; every point shipped" in (store.dir / "report.html").read_text()


def test_a_missing_database_stops_the_run_before_any_lab(tmp_path, monkeypatch, server):
    backend = use_fake_backend(monkeypatch, FakeBackend())
    config = load_config(influx_config(tmp_path, server.url, database="absent"))
    with pytest.raises(PreflightError, match="no database 'absent'"):
        Runner(config, Progress(Console(file=io.StringIO()), live=False)).run()
    assert backend.labs == [] and not (tmp_path / "runs").exists()
    assert app.main(["run", "--config", str(tmp_path / "config.toml")]) == 2
    assert app.main(["check", "--config", str(tmp_path / "config.toml")]) == 2


def test_a_resumed_run_ships_its_new_trials_to_the_same_run(tmp_path, monkeypatch, server):
    use_fake_backend(monkeypatch, FakeBackend(FakePath(client_output="iperf3: error - unable to connect")))
    config = load_config(influx_config(tmp_path, server.url))
    quiet = Progress(Console(file=io.StringIO()), live=False)
    store = Runner(config, quiet).run()
    assert [t.status for t in store.cells[0].trials] == ["failed", "failed"]
    use_fake_backend(monkeypatch, FakeBackend())       # the lab is right again
    resume = FileRunWriter.open(store.dir)
    config = load_config(store.dir / fmt.CONFIG_SNAPSHOT, list(resume.manifest.profiles),
                         profile_dir=store.dir / fmt.PROFILES_DIR)
    Runner(config, quiet, tmp_path / "runs", resume=resume).run()
    live = spooled_counts(store.dir)
    assert db_counts(server.url, store.run_id, live) == dict(live)
    flows = V1Target(InfluxSettings(url=server.url, database="longhaul"), Credential(None, "-"))
    statuses = {row["trial"]: (row["status"], row["error"]) for row in flows.rows(points.TRIAL, {"run": store.run_id})}
    flows.close()
    assert statuses == {"1": ("ok", ""), "2": ("ok", "")}     # the resumed trials replaced the failed ones


def test_export_and_report_from_influx_on_the_command_line(tmp_path, monkeypatch, server, capsys):
    use_fake_backend(monkeypatch, FakeBackend())      # the config names the fake lab
    run_dir = Path(shutil.copytree(FIXTURE, tmp_path / "old" / FIXTURE.name))
    config = influx_config(tmp_path, server.url)
    assert app.main(["check", "--config", str(config)]) == 0
    assert "InfluxDB: " in capsys.readouterr().out
    assert app.main(["export", str(run_dir), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "rebuilt from its files" in out and points.TCPINFO in out
    assert app.main(["report", "--from-influx", FIXTURE.name, "--config", str(config), "--format", "html",
                     "--out", str(tmp_path / "back")]) == 0
    rebuilt = tmp_path / "back" / FIXTURE.name
    assert (rebuilt / "report.html").is_file()
    assert load_store(rebuilt).entries == load_store(run_dir).entries
    html = (rebuilt / "report.html").read_text()
    assert "quickstart-003" in html
    assert app.main(["report", "--from-influx", "20000101-000000-abcdef", "--config", str(config)]) == 2
