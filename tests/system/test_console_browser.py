"""The web console in a real browser: Debian's headless chromium through Selenium, against the
console served by uvicorn on loopback over a real run store. Every page opens with no console
error; the live page follows a run whose store grows while it is watched, and ends with what the
store holds. LONGHAUL_SCREENSHOTS=DIR keeps a screenshot of each page (docs/console/ has them)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from browser_support import MISSING, assert_drawn_is, chromium, served
from console_fixtures import COMPLETE, PARTIAL, as_suite_run, console_store, set_statuses

from longhaul.appliance.console.auth import LOCAL_USER, Csrf, User
from longhaul.collectors.store.reader import load_store, load_trial_series
from longhaul.hardware import run_marker
from longhaul.hardware.executors.process import wait_until

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
LIVE = "20240613-120000-0f0f0f"
AGAIN = "20240611-110000-a1b2c4"
SHOTS = os.environ.get("LONGHAUL_SCREENSHOTS")


def _update(path: Path, **keys) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **keys}))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = console_store(tmp_path_factory.mktemp("store"))
    shutil.copytree(root / COMPLETE, root / AGAIN)      # the same cells again, to compare with
    _update(root / AGAIN / "manifest.json", run_id=AGAIN, started="2024-06-11T11:00:00Z")
    _update(root / AGAIN / "summary.json", run_id=AGAIN)
    as_suite_run(root / COMPLETE)                      # the two make a regression suite's history
    as_suite_run(root / AGAIN)
    shutil.copytree(root / PARTIAL, root / LIVE)       # the run to watch: cell table2-002 running
    _update(root / LIVE / "manifest.json", run_id=LIVE, status="running", started="2024-06-13T12:00:00Z")
    _update(root / LIVE / "summary.json", run_id=LIVE, status="running")
    shutil.rmtree(root / LIVE / "cells" / "table2-002" / "trial-2")      # its first trial only, so far
    return root


@pytest.fixture(scope="module")
def markers(tmp_path_factory):
    """The watched run's marker, naming a process of ours that stands for its longhaul."""
    state = tmp_path_factory.mktemp("markers")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    mp = pytest.MonkeyPatch()
    mp.setattr(run_marker, "STATE_DIR", state)
    yield state, proc
    mp.undo()
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def console(store, markers):
    with served(store) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def _open(browser, url: str, shot: str | None = None) -> str:
    browser.get(url)
    wait_until(lambda: browser.execute_script("return document.readyState") == "complete", 20, 0.1, what=url)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], (url, errors)
    if SHOTS and shot:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        height = browser.execute_script("return document.body.scrollHeight")
        browser.set_window_size(1360, min(max(height + 40, 600), 4000))
        browser.save_screenshot(str(Path(SHOTS) / f"{shot}.png"))
        browser.set_window_size(1360, 1000)
    return browser.page_source


def test_every_page_opens_with_no_console_error(console, browser, store):
    html = _open(browser, f"{console}/runs", "runs")
    assert all(run in html for run in (COMPLETE, AGAIN, PARTIAL, LIVE))
    html = _open(browser, f"{console}/runs/{COMPLETE}", "run")
    cells = [a.get_attribute("href") for a in browser.find_elements("css selector", "#results a")]
    assert len(cells) == len(load_store(store / COMPLETE).entries) == 3
    for k, href in enumerate(cells):
        page = _open(browser, href, "cell" if k == 1 else None)
        assert page.count("<svg") >= 2
    _open(browser, f"{console}/runs?status=interrupted", None)
    _open(browser, f"{console}/compare?a={PARTIAL}&b={COMPLETE}", None)      # not comparable: says why
    _open(browser, f"{console}/compare?a={COMPLETE}&b={AGAIN}", "compare")
    _open(browser, f"{console}/runs/{PARTIAL}/live", None)
    assert 'id="suite-table2"' in _open(browser, f"{console}/suites", "suites")


def test_the_live_page_follows_the_store_and_ends_with_what_it_holds(console, browser, store, markers):
    state, proc = markers
    (state / "lh-watched.json").write_text(json.dumps({"pid": proc.pid, "run_dir": str(store / LIVE)}))
    _open(browser, f"{console}/runs/{LIVE}/live")
    text = lambda id_: browser.find_element("id", id_).text
    wait_until(lambda: text("series-of") == "cell table2-002 / trial 1", 10, 0.1, what="the first trial on the page")
    assert text("state") == "running" and text("done") == "2" and text("total") == "4" and text("cell") == "table2-002"
    stored = load_trial_series(store / LIVE / "cells" / "table2-002" / "trial-1")
    assert_drawn_is(browser, stored.throughput, stored.rtt)
    # the run stores its second trial: the page shows it within 2 s, without a reload
    shutil.copytree(store / PARTIAL / "cells" / "table2-002" / "trial-2", store / LIVE / "cells" / "table2-002" / "trial-2")
    t0 = time.monotonic()
    wait_until(lambda: text("series-of") == "cell table2-002 / trial 2", 5, 0.1, what="the second trial on the page")
    assert time.monotonic() - t0 < 2.5
    if SHOTS:
        _open(browser, browser.current_url, None)
        wait_until(lambda: text("series-of") == "cell table2-002 / trial 2", 5, 0.1, what="the page again")
        browser.save_screenshot(str(Path(SHOTS) / "live.png"))
    # the run ends: its cells complete, its process gone; the page says so and holds the store's seconds
    set_statuses(store / LIVE, ["complete", "complete", "complete", "complete"])
    _update(store / LIVE / "summary.json", status="complete")
    _update(store / LIVE / "manifest.json", status="complete")
    proc.kill()
    proc.wait()
    wait_until(lambda: text("link") == "the run has ended", 10, 0.1, what="the end of the stream")
    second = load_trial_series(store / LIVE / "cells" / "table2-002" / "trial-2")
    assert text("state") == "complete" and text("done") == "4" and text("series-of") == "cell table2-002 / trial 2"
    assert_drawn_is(browser, second.throughput, second.rtt)


def test_a_slow_run_fetches_its_sections_and_the_planning_and_start_pages_open(browser, tmp_path, monkeypatch):
    from lab_support import write_lab_config
    from sweep_fixtures import make_sweep_store

    from longhaul.appliance.cli.app import main
    from longhaul.appliance.console import app as console_app

    axes = {"flows.fg.cca": ("cubic", "htcp"), "flows.fg.streams": (1, 4),
            "topology.rtt_ms": (0.4, 11.8, 45.6, 91.6, 183.0)}
    run = make_sweep_store(tmp_path / "runs", axes, trials=2, seconds=8)
    config = write_lab_config(tmp_path, "[topology]\npairs = 1\n[[flows]]\nname = \"fg\"\nrole = \"foreground\"\n"
                                        "cca = \"cubic\"\nduration_s = 5\n", "one")
    assert main(["plan", "--synthetic", "1", "--out", str(tmp_path / "plans" / "day-1"), "--format", "html"]) == 0
    monkeypatch.setattr(console_app, "INLINE_WAIT_S", 0.0)     # every view as a 630-cell run's
    with served(run.parent, config=config, plans=tmp_path / "plans") as url:
        _open(browser, f"{url}/runs/{run.name}")
        assert browser.find_elements("css selector", "#studies[data-fragment]")
        wait_until(lambda: browser.find_elements("css selector", "#studies .study svg"), 120, 0.2,
                   what="the sections fetched into the run page")
        _open(browser, browser.current_url, "run-sweep")          # once computed, the page comes whole
        _open(browser, f"{url}/compare?a={run.name}&b={run.name}")
        wait_until(lambda: browser.find_elements("css selector", "#result #fingerprint"), 120, 0.2,
                   what="the comparison fetched into the compare page")
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert "day-1" in _open(browser, f"{url}/plans", "plans")
        assert _open(browser, f"{url}/plans/day-1", "plan").count("<svg") >= 2
        assert 'id="start-form"' in _open(browser, f"{url}/start", "start")
        _open(browser, f"{url}/lab")
        browser.find_element("id", "check").click()             # `longhaul check` of the config, on request
        wait_until(lambda: browser.find_elements("id", "check-status"), 120, 0.2, what="the lab's check")
        assert "valid; 1 profile(s)" in _open(browser, browser.current_url, "lab")


@contextmanager
def hostile_site(page: str):
    """Another web site the operator's browser opens: an HTTP server on 127.0.0.2 (another origin than
    the console's 127.0.0.1) serving one page."""
    body = page.encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    # a thread a connection, not waited for at the end: Chromium keeps a preconnected socket open to
    # the site with no request on it, and a one-thread server's shutdown waited 110 s for its read
    server = ThreadingHTTPServer(("127.0.0.2", 0), Page)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_of_another_site_can_neither_change_nor_read_the_console(store, markers, tmp_path):
    """Two attacks from the operator's own browser. A page of another origin posts the stop form, even
    with a valid CSRF token: refused by its Origin, the run untouched. A page whose name resolves to
    the console's address (DNS rebinding; chromium's --host-resolver-rules maps it) reads nothing."""
    state, _ = markers
    # stands for a live run; its own SIGINT handler, as the runner's (a background job's child inherits it ignored)
    run = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                            "signal.signal(signal.SIGINT, signal.default_int_handler)\ntime.sleep(600)"])
    (state / "lh-attacked.json").write_text(json.dumps({"pid": run.pid, "run_dir": str(store / AGAIN)}))
    csrf = Csrf(b"h" * 32)
    token = csrf.token(User(LOCAL_USER, "operator"))
    try:
        with served(store, csrf) as url, chromium("--host-resolver-rules=MAP attacker.test 127.0.0.1") as browser:
            form = (f'<form id="f" method="post" action="{url}/runs/{AGAIN}/stop"><input name="csrf" value="{token}">'
                    '</form><script>document.getElementById("f").submit()</script>')
            with hostile_site(form) as site:
                browser.get(site)
                wait_until(lambda: browser.current_url.startswith(url), 20, 0.1, what="the form's post")
                wait_until(lambda: "CSRF check" in browser.page_source, 10, 0.1, what="the console's answer")
            assert run.poll() is None                              # not stopped
            port = url.rsplit(":", 1)[1]
            browser.get(f"http://attacker.test:{port}/runs")
            wait_until(lambda: "does not answer to that host name" in browser.page_source, 10, 0.1,
                       what="the console's refusal of a rebound name")
            assert AGAIN not in browser.page_source and COMPLETE not in browser.page_source
            browser.get(f"http://localhost:{port}/runs/{AGAIN}/live")   # the console's own page still may
            wait_until(lambda: browser.find_elements("id", "stop"), 10, 0.1, what="the stop button")
            browser.find_element("id", "stop").click()
            wait_until(lambda: run.poll() is not None, 10, 0.1, what="the run to get SIGINT")
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
        (state / "lh-attacked.json").unlink()
