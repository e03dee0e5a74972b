"""The queries docs/telemetry.md gives for the common views, run as written against a real
influxd (InfluxQL, Debian's 1.6.7) over two exported runs of different kernels."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from influx_views import FIXTURE, OTHER, variant, views
from influxd import influx_server

from longhaul.collectors.store.influx.backfill import export_run
from longhaul.collectors.store.influx.mirror import preflight
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.series import read_rows
from longhaul.core.tables import read_json

pytestmark = pytest.mark.timeout(120)


def test_every_view_has_both_languages():
    assert views("sql", "--").keys() == views("flux", "//").keys() == {
        "flow-throughput", "jain-per-cell", "rtt-inflation-per-kernel", "host-steal"}


def test_the_documented_influxql_views_answer(tmp_path):
    with influx_server(tmp_path / "db") as srv:
        target = preflight(InfluxSettings(url=srv.url, database="longhaul"), Credential(None, "-"))
        first = Path(shutil.copytree(FIXTURE, tmp_path / "runs" / FIXTURE.name))
        for run in (first, variant(tmp_path)):
            export_run(run, target)
        now = time.time_ns()
        target.write([f"cpu,run={OTHER},host=R1,cpu=cpu-total usage_steal=2.5 {now}",
                      f"cpu,run={OTHER},host=R1,cpu=cpu-total usage_steal=3.5 {now + 10**9}"])
        client = target.client
        sql = views("sql", "--")
        params = {"run": FIXTURE.name, "cell": "quickstart-002", "flow": "fg", "profile": "quickstart"}

        points = list(client.query(sql["flow-throughput"], bind_params=params, epoch="ns").get_points())
        rows = [r for r in read_rows(first / "cells/quickstart-002/trial-1/throughput.csv", [])
                if r["flow"] == "fg" and r["stream"] == "all"]
        assert [p["mbps"] for p in points] == [float(r["mbps"]) for r in rows]

        result = client.query(sql["jain-per-cell"], bind_params=params)
        jains = {(tags["cell"], tags["run"]): next(iter(pts))["jain"] for (_, tags), pts in result.items()}
        assert set(jains) == {(c, r) for c in ("quickstart-002", "quickstart-003") for r in (FIXTURE.name, OTHER)}
        for (cell, run), jain in jains.items():
            assert jain == pytest.approx(read_json(first / f"cells/{cell}/trial-1/trial.json")["jain"])

        result = client.query(sql["rtt-inflation-per-kernel"], bind_params=params)
        kernels = {tags["kernel"] for (_, tags), _ in result.items()}
        assert kernels == {"6.18.44-fc-v657", "6.1.0-28-amd64"}
        for (_, tags), pts in result.items():
            (row,) = list(pts)
            trial = read_json(first / f"cells/{tags['cell']}/trial-1/trial.json")
            assert row["median_ms"] == pytest.approx(trial["rtt"]["inflation_median_ms"])
            assert row["max_ms"] == pytest.approx(trial["rtt"]["inflation_max_ms"])

        result = client.query(sql["host-steal"], bind_params={"run": OTHER})
        means = [p["mean"] for (_, tags), pts in result.items() for p in pts if p["mean"] is not None]
        assert means and all(2.5 <= m <= 3.5 for m in means)
        target.close()
