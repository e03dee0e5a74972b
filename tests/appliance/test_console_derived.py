"""What the console computes from the store and shares (appliance/console/derived.py): a slow view
is computed once for every request that asks meanwhile, pages show the rest of themselves at once
and fetch the slow part, and a store that moves is computed again."""
from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path

import pytest
from console_fixtures import console_store
from starlette.testclient import TestClient
from sweep_fixtures import make_sweep_store

from longhaul.appliance.console import app as console_app
from longhaul.appliance.console.app import ConsoleSettings, create_app
from longhaul.appliance.console.derived import Derived

RUN = "20240611-101500-a1b2c3"
SWEEP = {"flows.fg.cca": ("cubic",), "flows.fg.streams": (1, 4), "tuning.buffer": ("default",),
         "topology.rtt_ms": (0.4, 11.8, 45.6, 91.6, 183.0)}          # enough for the profile section


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return console_store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return make_sweep_store(tmp_path_factory.mktemp("sweep"), SWEEP, trials=2, seconds=8)


def test_one_computation_serves_every_request_that_asks_meanwhile():
    derived, gate, calls = Derived(), threading.Event(), []

    def slow():
        calls.append(1)
        gate.wait(5)
        return "view"

    async def ask():
        first = await derived.within("k", slow, 0.05)
        second = await derived.within("k", slow, 0.05)
        gate.set()
        third = await derived.within("k", slow, 5)
        return first, second, third

    assert asyncio.run(ask()) == ((False, None), (False, None), (True, "view"))
    assert len(calls) == 1
    derived.close()


def test_a_failed_computation_raises_and_is_tried_again_and_old_views_are_forgotten():
    derived, calls = Derived(limit=2), []

    def failing():
        calls.append(1)
        raise ValueError("no store")

    async def ask():
        for _ in range(2):
            with pytest.raises(ValueError):
                await derived.within("bad", failing, 5)
        for key in ("a", "b", "c"):
            assert await derived.within(key, lambda key=key: key, 5) == (True, key)

    asyncio.run(ask())
    assert len(calls) == 2                       # a failure is not kept
    assert list(derived._held) == ["b", "c"]     # at most `limit` views
    derived.close()


def _fetch(client: TestClient, url: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = client.get(url)
        if response.status_code != 202:
            assert response.status_code == 200, response.text
            return response.text
    raise AssertionError(f"{url} still computing after {timeout_s} s")


def test_a_slow_run_page_comes_at_once_and_fetches_its_sections(sweep, monkeypatch):
    settings, run = ConsoleSettings(sweep.parent), sweep.name
    monkeypatch.setattr(console_app, "INLINE_WAIT_S", 60.0)
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        whole = client.get(f"/runs/{run}").text                 # a small run: sections in place
        assert "data-fragment" not in whole and 'class="study"' in whole
    monkeypatch.setattr(console_app, "INLINE_WAIT_S", 0.0)     # as a 630-cell run's page does
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        page = client.get(f"/runs/{run}").text
        assert f'data-fragment="/runs/{run}/sections"' in page and 'id="results"' in page
        assert 'class="study"' not in page
        fragment = _fetch(client, f"/runs/{run}/sections")
    studies = re.findall(r'<div class="study">', whole)
    assert studies and len(re.findall(r'<div class="study">', fragment)) == len(studies)
    assert "<html" not in fragment                              # a part, placed into the page


def test_a_slow_comparison_is_fetched_and_computed_again_when_a_store_moves(store, monkeypatch):
    monkeypatch.setattr(console_app, "INLINE_WAIT_S", 0.0)
    calls = []
    real = console_app._comparison
    monkeypatch.setattr(console_app, "_comparison", lambda a, b: calls.append(1) or real(a, b))
    with TestClient(create_app(ConsoleSettings(store)), base_url="http://localhost") as client:
        page = client.get(f"/compare?a={RUN}&b={RUN}").text
        assert "data-fragment=\"/compare/result?a=" in page
        url = f"/compare/result?a={RUN}&b={RUN}"
        assert 'id="fingerprint"' in _fetch(client, url)
        _fetch(client, url)
        assert len(calls) == 1                                  # shared while the store stands
        summary = store / RUN / "summary.json"
        os.utime(summary, ns=(summary.stat().st_atime_ns, summary.stat().st_mtime_ns + 1_000_000_000))
        _fetch(client, url)
        assert len(calls) == 2
        assert client.get("/compare/result?a=nope&b=nope").status_code == 404


def test_every_viewer_of_a_live_run_shares_one_look_at_its_store(store, monkeypatch):
    from longhaul.appliance.console import live

    calls, real = [], live.snapshot
    monkeypatch.setattr(live, "snapshot", lambda run_dir, running: calls.append(run_dir) or real(run_dir, running))
    feeds = live.Feeds(interval_s=60.0)
    run_dir = store / RUN
    looks = [feeds.look(run_dir, lambda p: True) for _ in range(20)]       # twenty viewers, one interval
    assert len(calls) == 1 and len(set(looks)) == 1 and looks[0][1] is True
    feeds = live.Feeds(interval_s=0.0)                                    # every look due: still one snapshot
    for _ in range(3):                                                    # while the store stands
        feeds.look(run_dir, lambda p: True)
    assert len(calls) == 2
    summary = run_dir / "summary.json"
    os.utime(summary, ns=(summary.stat().st_atime_ns, summary.stat().st_mtime_ns + 1_000_000_000))
    feeds.look(run_dir, lambda p: True)
    assert len(calls) == 3                                                # the store moved


def test_the_suites_history_is_computed_once_per_state_of_the_store_and_the_schedule_each_time(tmp_path, monkeypatch):
    import shutil as sh

    from console_fixtures import as_suite_run

    from longhaul.appliance.console import suites

    store = console_store(tmp_path / "store")
    as_suite_run(store / RUN)

    histories, schedules = [], []
    real_views, real_schedule = suites.suite_views, suites.schedule_of
    monkeypatch.setattr(suites, "suite_views", lambda root: histories.append(1) or real_views(root))
    monkeypatch.setattr(suites, "schedule_of", lambda name: schedules.append(name) or real_schedule(name))
    with TestClient(create_app(ConsoleSettings(store)), base_url="http://localhost") as client:
        client.get("/suites")
        client.get("/suites")
        assert len(histories) == 1
        sh.copytree(store / RUN, store / "20240611-101500-a1b2c9")          # a run is added
        try:
            client.get("/suites")
        finally:
            sh.rmtree(store / "20240611-101500-a1b2c9")
    assert len(histories) == 2
    assert real_views(store) and len(schedules) == 3 * len(real_views(store))     # systemd asked each time
