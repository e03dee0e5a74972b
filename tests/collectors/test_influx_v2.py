"""longhaul's InfluxDB 2.x path against a real InfluxDB OSS 2.7 (tests/servers/build-influxd2.sh):
the token preflight, export and read-back through /api/v2/write and Flux, and the Flux queries of
docs/telemetry.md."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from influx_views import OTHER, variant, views
from influxd import BUCKET, ORG, TOKEN, influx2_server

from longhaul.collectors.store.influx import points
from longhaul.collectors.store.influx.backfill import export_run, spooled_counts
from longhaul.collectors.store.influx.mirror import preflight
from longhaul.collectors.store.influx.readback import rebuild_run
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.reader import load_store
from longhaul.core.errors import PreflightError
from longhaul.core.tables import read_json

FIXTURE = Path(__file__).parents[1] / "data" / "run-v1" / "20261123-222341-a39045"
RUN_ID = FIXTURE.name
GOOD = Credential(TOKEN, "$LONGHAUL_INFLUX_TOKEN")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with influx2_server(tmp_path_factory.mktemp("influxd2")) as srv:
        yield srv


def settings(url: str, bucket: str = BUCKET) -> InfluxSettings:
    return InfluxSettings(url=url, bucket=bucket, org=ORG)


def test_the_token_and_the_bucket_are_checked_before_anything(server):
    with pytest.raises(PreflightError, match="no token was given.*LONGHAUL_INFLUX_TOKEN"):
        preflight(settings(server.url), Credential(None, "$LONGHAUL_INFLUX_TOKEN"))
    with pytest.raises(PreflightError, match="the token was refused.*/etc/longhaul/token"):
        preflight(settings(server.url), Credential("wrong", "/etc/longhaul/token"))
    with pytest.raises(PreflightError, match="has no bucket 'absent'"):
        preflight(settings(server.url, "absent"), GOOD)
    preflight(settings(server.url), GOOD).close()


def test_export_and_read_back_through_the_2x_api(server, tmp_path):
    run_dir = Path(shutil.copytree(FIXTURE, tmp_path / "runs" / RUN_ID))
    target = preflight(settings(server.url), GOOD)
    try:
        done = export_run(run_dir, target)
        assert done.report.rejected_lines == 0
        expected = spooled_counts(run_dir)
        assert {m: sum(1 for _ in target.rows(m, {"run": RUN_ID})) for m in expected} == dict(expected)
        back = rebuild_run(target, RUN_ID, tmp_path / "back")
    finally:
        target.close()
    original, rebuilt = load_store(run_dir), load_store(back)
    assert rebuilt.manifest == original.manifest and rebuilt.entries == original.entries
    for entry in original.entries:
        a, b = original.trial_series(entry.id, 1), rebuilt.trial_series(entry.id, 1)
        for flow in a.throughput:
            assert (a.throughput[flow][1] == b.throughput[flow][1]).all()
        assert (a.rtt[1] == b.rtt[1]).all() and a.srtt.keys() == b.srtt.keys()


def test_the_documented_flux_views_answer(server, tmp_path):
    target = preflight(settings(server.url), GOOD)
    try:
        first = Path(shutil.copytree(FIXTURE, tmp_path / "runs" / RUN_ID))
        for run in (first, variant(tmp_path)):
            export_run(run, target)
        now = time.time_ns()
        target.write([f"cpu,run={OTHER},host=R1,cpu=cpu-total usage_steal=2.5 {now}",
                      f"cpu,run={OTHER},host=R1,cpu=cpu-total usage_steal=3.5 {now + 10**9}"])
        query = target.client.query_api()
        flux = views("flux", "//")

        def ask(view: str, **params) -> list:
            head = "".join(f'{k} = "{v}"\n' for k, v in params.items())
            return [r for table in query.query(head + flux[view], org=ORG) for r in table.records]

        got = ask("flow-throughput", run=RUN_ID, cell="quickstart-002", flow="fg")
        rows = [r for r in load_store(first).trial_series("quickstart-002", 1).throughput["fg"][1]]
        assert [r.get_value() for r in got] == rows

        got = ask("jain-per-cell", profile="quickstart")
        jains = {(r.values["cell"], r.values["run"]): r.get_value() for r in got}
        assert set(jains) == {(c, r) for c in ("quickstart-002", "quickstart-003") for r in (RUN_ID, OTHER)}
        for (cell, _), jain in jains.items():
            assert jain == pytest.approx(read_json(first / f"cells/{cell}/trial-1/trial.json")["jain"])

        got = ask("rtt-inflation-per-kernel", profile="quickstart")
        assert {r.values["kernel"] for r in got} == {"6.18.44-fc-v657", "6.1.0-28-amd64"}
        for r in got:
            trial = read_json(first / f"cells/{r.values['cell']}/trial-1/trial.json")
            key = "inflation_median_ms" if r.get_field() == "rtt_inflation_median_ms" else "inflation_max_ms"
            assert r.get_value() == pytest.approx(trial["rtt"][key])

        got = ask("host-steal", run=OTHER)
        assert got and all(2.5 <= r.get_value() <= 3.5 for r in got)
        assert points.THROUGHPUT in flux["flow-throughput"]
    finally:
        target.close()
