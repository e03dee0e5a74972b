"""The queries docs/telemetry.md gives for the common views, run as written against a real
influxd (InfluxQL, Debian's 1.6.7) over two exported runs of different kernels."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from influxd import influx_server

from longhaul.collectors.store.influx.backfill import export_run
from longhaul.collectors.store.influx.mirror import preflight
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.series import read_rows
from longhaul.core.tables import read_json, write_json

DOC = Path(__file__).parents[1] / "docs" / "telemetry.md"
FIXTURE = Path(__file__).parent / "data" / "run-v1" / "20261123-222341-a39045"
OTHER = "20261124-101500-b0b0b0"

pytestmark = pytest.mark.timeout(120)


def views(language: str, comment: str) -> dict[str, str]:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    out = {}
    for block in blocks:
        first, _, rest = block.partition("\n")
        assert first.startswith(f"{comment} view: "), block
        out[first.removeprefix(f"{comment} view: ").strip()] = rest.strip()
    return out


def test_every_view_has_both_languages():
    assert views("sql", "--").keys() == views("flux", "//").keys() == {
        "flow-throughput", "jain-per-cell", "rtt-inflation-per-kernel", "host-steal"}


def _variant(tmp_path: Path) -> Path:
    """The fixture as a second run on another kernel."""
    run = Path(shutil.copytree(FIXTURE, tmp_path / "runs" / OTHER))
    manifest = read_json(run / "manifest.json")
    manifest["run_id"], manifest["host"]["kernel"] = OTHER, "6.1.0-28-amd64"
    manifest["started"] = "2026-11-24T10:15:00Z"
    write_json(run / "manifest.json", manifest)
    summary = read_json(run / "summary.json")
    summary["run_id"] = OTHER
    write_json(run / "summary.json", summary)
    return run


def test_the_documented_influxql_views_answer(tmp_path):
    with influx_server(tmp_path / "db") as srv:
        target = preflight(InfluxSettings(url=srv.url, database="longhaul"), Credential(None, "-"))
        first = Path(shutil.copytree(FIXTURE, tmp_path / "runs" / FIXTURE.name))
        for run in (first, _variant(tmp_path)):
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
