"""The console's live page during a real run on the embedded lab, in headless chromium: while the
trial runs its figures change every second (the trial's live.csv), and once the run has ended the
page holds what the store holds for those seconds (throughput.csv, rtt.csv). An operator starts a
profile from the console, watches it and stops it, and nothing of the run is left."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest
from browser_support import MISSING, assert_drawn_is, chromium, drawn, served
from lab_support import PATIENT_VERIFY, our_namespaces, requires_lab, write_lab_config

from longhaul.collectors.store.format import LIVE_CSV
from longhaul.collectors.store.reader import load_store, load_trial_series
from longhaul.hardware.executors.process import wait_until

pytestmark = [pytest.mark.lab, requires_lab,
              pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
              pytest.mark.skipif(not shutil.which("iperf3"), reason="needs iperf3 (make setup installs it)")]

PROFILE = """
[profile]
description = "the console watches one 15 s transfer"
repeats = 1
[topology]
pairs = 1
bottleneck_rate_mbps = 50
rtt_ms = 20
queue = "1bdp"
[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 15
"""


def test_the_live_page_moves_each_second_and_ends_with_the_store(tmp_path):
    config = write_lab_config(tmp_path, PROFILE, "watch", verify=PATIENT_VERIFY)
    (tmp_path / "runs").mkdir()
    with served(tmp_path / "runs") as url, chromium() as browser:
        run = subprocess.Popen([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            watch(tmp_path / "runs", url, browser, run)
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGINT)          # its teardown ends what it started
                run.wait(120)


def watch(runs, url: str, browser, run: subprocess.Popen) -> None:
    live = lambda: next(runs.glob(f"*/cells/*/trial-1/{LIVE_CSV}"), None)
    wait_until(lambda: live() is not None or run.poll() is not None, 240, 0.2, what="the trial to start")
    assert run.poll() is None, run.stderr.read()[-2000:]
    run_id = live().parents[3].name
    browser.get(f"{url}/runs/{run_id}/live")
    text = lambda id_: browser.find_element("id", id_).text
    wait_until(lambda: "running" in text("series-of"), 15, 0.1, what="the trial under way on the page")
    counts = []
    for _ in range(6):                                  # watched for 5 s: a point more each second
        counts.append(len(drawn(browser).get("fg", [])))
        time.sleep(1.0)
    assert counts == sorted(counts) and counts[-1] - counts[0] >= 4, counts
    assert run.wait(300) == 0, run.stderr.read()[-2000:]
    wait_until(lambda: text("link") == "the run has ended", 15, 0.1, what="the end on the page")
    (cell,) = load_store(runs / run_id).entries
    stored = load_trial_series(runs / run_id / "cells" / cell.id / "trial-1")
    assert text("series-of") == f"cell {cell.id} / trial 1"
    assert_drawn_is(browser, stored.throughput, stored.rtt)
    assert not list(runs.glob(f"*/cells/*/trial-*/{LIVE_CSV}"))


def test_an_operator_starts_a_profile_watches_it_and_stops_it(tmp_path):
    from selenium.webdriver.support.ui import Select

    config = write_lab_config(tmp_path, PROFILE, "watch", verify=PATIENT_VERIFY)
    runs = tmp_path / "runs"
    runs.mkdir()
    with served(runs, config=config, start_logs=tmp_path / "starts") as url, chromium() as browser:
        browser.get(f"{url}/start")
        assert "watch" in browser.find_element("id", "profiles").text
        Select(browser.find_element("id", "start-name")).select_by_value("watch")
        browser.find_element("id", "start").click()
        wait_until(lambda: browser.current_url.endswith("/live"), 60, 0.2, what="the started run's live page")
        run_id = browser.current_url.split("/runs/")[1].split("/")[0]
        text = lambda id_: shown(browser, id_)
        wait_until(lambda: "running" in text("series-of"), 240, 0.2, what="the trial under way on the page")
        browser.find_element("id", "stop").click()
        wait_until(lambda: browser.current_url.endswith("/live") and text("link") == "the run has ended", 120, 0.2,
                   what="the stopped run's end on the page")
        # the store says "interrupted" as soon as the trial is cut; the process that wrote it ends
        # after the lab's teardown, and only then does the start page say so (reloaded until it does)
        def start_entry() -> str:
            browser.get(f"{url}/start")
            return shown(browser, "start-1")

        wait_until(lambda: "ended (exit" in start_entry(), 120, 1.0, what="the start page's end of the run")
        started = start_entry()
        assert "profile watch" in started and "ended (exit" in started and run_id in started, started
        assert browser.get_log("browser") == []
    assert load_store(runs / run_id).status == "interrupted"
    assert not our_namespaces()
    assert not (tmp_path / "starts").exists() or list((tmp_path / "starts").glob("*.log"))   # its output kept


def shown(browser, id_: str) -> str:
    """The element's text, or "" while a navigation has the page between documents."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        return browser.find_element("id", id_).text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""
