"""The web console over a real run store, through Starlette's test client: pages, filters, the
live stream, who may do what, and what is never served. A real browser opens the same pages in
tests/system/test_console_browser.py."""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from console_fixtures import console_store
from starlette.testclient import TestClient

from longhaul.appliance.cli.app import main
from longhaul.appliance.console import live
from longhaul.appliance.console.app import ConsoleSettings, create_app
from longhaul.appliance.console.auth import Csrf, User, Users, hash_password
from longhaul.hardware import run_marker

TOKEN = "a-long-random-bearer-token-for-ci"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return console_store(tmp_path_factory.mktemp("store"))


@pytest.fixture
def client(store) -> TestClient:
    return TestClient(create_app(ConsoleSettings(store)), base_url="http://localhost")


@pytest.fixture(scope="module")
def users_file(tmp_path_factory) -> Path:
    import hashlib
    path = tmp_path_factory.mktemp("users") / "users.toml"
    path.write_text(f'[users.vera]\nrole = "viewer"\npassword = "{hash_password("vera-pass")}"\n'
                    f'[users.otto]\nrole = "operator"\npassword = "{hash_password("otto-pass")}"\n'
                    f'[users.ci]\nrole = "viewer"\ntoken_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\n')
    return path


def basic(name: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


def test_runs_page_lists_every_run_newest_first_with_its_verdict(client):
    html = client.get("/runs").text
    ids = re.findall(r'<a href="/runs/([^"/]+)">', html)
    assert ids == ["20240612-090000-d4e5f6", "20240611-101500-a1b2c3"]
    assert "all 3 cells complete" in html and "interrupted: 2 of 4 cells complete" in html
    assert "not-a-run" not in html


@pytest.mark.parametrize("query,expected", [
    ("status=complete", ["20240611-101500-a1b2c3"]),
    ("status=interrupted", ["20240612-090000-d4e5f6"]),
    ("since=2024-06-12", ["20240612-090000-d4e5f6"]),
    ("until=2024-06-11", ["20240611-101500-a1b2c3"]),
    ("profile=table2", ["20240612-090000-d4e5f6", "20240611-101500-a1b2c3"]),
    ("profile=nothing-like-it", []),
    ("kernel=6.1.0", ["20240612-090000-d4e5f6", "20240611-101500-a1b2c3"]),
])
def test_runs_filters(client, query, expected):
    assert re.findall(r'<a href="/runs/([^"/]+)">', client.get(f"/runs?{query}").text) == expected


def test_run_page_links_a_page_for_every_cell_and_each_opens(client, store):
    run = "20240611-101500-a1b2c3"
    html = client.get(f"/runs/{run}").text
    cells = sorted(set(re.findall(rf'/runs/{run}/cells/([^"]+)"', html)))
    stored = sorted(p.name for p in (store / run / "cells").iterdir())
    assert cells == stored and "Lab verification" in html and "Results" in html
    for cell in cells:
        page = client.get(f"/runs/{run}/cells/{cell}")
        assert page.status_code == 200 and page.text.count("<svg") >= 2, cell


def test_a_cell_page_shows_the_same_numbers_as_the_report(client, store):
    from longhaul.collectors.store.reader import load_store
    from longhaul.reports.rows import result_row

    run = load_store(store / "20240611-101500-a1b2c3")
    cell = run.entries[1]
    html = client.get(f"/runs/{run.run_id}/cells/{cell.id}").text
    assert all(f["text"] in html for f in result_row(cell)["flows"])


@pytest.mark.parametrize("path", [
    "/runs/..%2F..%2Fetc%2Fpasswd", "/runs/%2Fetc", "/runs/.hidden", "/runs/not-a-run",
    "/runs/20240611-101500-a1b2c3/cells/..%2F..%2Fmanifest.json", "/runs/20240611-101500-a1b2c3/cells/nope",
    "/static/..%2Fapp.py", "/static/../app.py", "/runs/20240611-101500-a1b2c3/..%2F..%2F..%2Fetc%2Fpasswd",
])
def test_nothing_outside_the_store_is_served(client, path):
    r = client.get(path)
    assert r.status_code == 404 and "root:" not in r.text and "import" not in r.text, (path, r.status_code)


def test_pages_carry_a_policy_that_allows_only_the_console_s_own_scripts(client):
    r = client.get("/runs")
    assert "script-src 'self'" in r.headers["content-security-policy"] and r.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in client.get("/runs/20240611-101500-a1b2c3/live").text     # no inline script


def test_the_live_stream_of_a_finished_run_sends_its_state_then_ends(client):
    with client.stream("GET", "/runs/20240611-101500-a1b2c3/live/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    assert text.startswith("retry: 2000")
    data = json.loads(re.search(r"^data: (\{.*\})$", text, re.M).group(1))
    assert data["cells_done"] == data["cells_total"] == 3 and data["live"] is False
    assert data["throughput"] and all(len(p) == 2 for p in next(iter(data["throughput"].values())))
    assert "event: end" in text


def test_a_live_snapshot_counts_cells_and_estimates_what_is_left(store):
    import datetime as dt
    run = store / "20240612-090000-d4e5f6"
    snap = live.snapshot(run, live=True, now=dt.datetime(2024, 6, 12, 10, 0, tzinfo=dt.timezone.utc))
    assert (snap.cells_total, snap.cells_done, snap.current) == (4, 2, "table2-002")
    assert snap.eta_s == pytest.approx(3600 / 2 * 2, rel=1e-6)       # an hour for 2 cells, 2 to go
    assert snap.series_of == "table2-002 / trial 2" and snap.throughput     # its newest stored trial
    assert json.loads(snap.to_json())["run_id"] == "20240612-090000-d4e5f6"


def test_without_a_users_file_the_local_user_operates(client):
    assert "local · operator" in client.get("/runs").text


def test_with_a_users_file_requests_need_credentials(store, users_file):
    c = TestClient(create_app(ConsoleSettings(store, Users.load(users_file))), base_url="http://localhost")
    assert c.get("/runs").status_code == 401 and "Basic" in c.get("/runs").headers["www-authenticate"]
    assert c.get("/runs", headers=basic("vera", "wrong")).status_code == 401
    assert c.get("/runs", headers=basic("nobody", "vera-pass")).status_code == 401
    assert c.get("/static/live.js").status_code == 401
    assert "vera · viewer" in c.get("/runs", headers=basic("vera", "vera-pass")).text
    assert c.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert c.get("/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401


@pytest.fixture
def a_live_run(store, tmp_path, monkeypatch):
    """The complete run as if its longhaul process were alive: a marker naming a child of ours
    that exits on SIGINT, as a run does after its teardown."""
    monkeypatch.setattr(run_marker, "STATE_DIR", tmp_path / "markers")
    # its own SIGINT handler, as the runner's signals_raise: a child of a shell's background job
    # inherits SIGINT ignored, and Python then installs none (a cold .ci/run started with `&` failed so)
    child = ("import signal, sys, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
             "print('ready', flush=True)\ntry:\n time.sleep(60)\nexcept KeyboardInterrupt:\n pass")
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    (tmp_path / "markers").mkdir()
    (tmp_path / "markers" / "lh-test.json").write_text(json.dumps({"pid": proc.pid, "run_dir": str(store / "20240611-101500-a1b2c3")}))
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_viewer_cannot_stop_and_an_operator_needs_the_page_s_token_and_origin(store, users_file, a_live_run):
    csrf = Csrf(b"k" * 32)
    c = TestClient(create_app(ConsoleSettings(store, Users.load(users_file)), csrf), base_url="http://localhost")
    url, origin = "/runs/20240611-101500-a1b2c3/stop", {"Origin": "http://localhost"}
    viewer, operator = basic("vera", "vera-pass"), basic("otto", "otto-pass")
    live_page = c.get("/runs/20240611-101500-a1b2c3/live", headers=viewer).text
    assert 'id="stop"' not in live_page and 'id="stop"' in c.get("/runs/20240611-101500-a1b2c3/live", headers=operator).text
    assert c.post(url, data={"csrf": csrf.token(User("vera", "viewer"))}, headers={**viewer, **origin}).status_code == 403
    assert c.post(url, data={}, headers={**operator, **origin}).status_code == 403                      # no token
    assert c.post(url, data={"csrf": csrf.token(User("vera", "viewer"))}, headers={**operator, **origin}).status_code == 403
    assert c.post(url, data={"csrf": csrf.token(User("otto", "operator"))},
                  headers={**operator, "Origin": "http://evil.test"}).status_code == 403                 # another site
    assert a_live_run.poll() is None                        # none of these touched the run
    r = c.post(url, data={"csrf": csrf.token(User("otto", "operator"))}, headers={**operator, **origin},
               follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/live")
    deadline = time.monotonic() + 10
    while a_live_run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert a_live_run.returncode == 0                       # it got SIGINT and ended as a run does


def test_stopping_a_run_that_is_not_running_is_a_conflict(store, monkeypatch, tmp_path):
    monkeypatch.setattr(run_marker, "STATE_DIR", tmp_path / "markers")
    csrf = Csrf(b"z" * 32)
    c = TestClient(create_app(ConsoleSettings(store), csrf), base_url="http://localhost")
    assert 'id="stop"' not in c.get("/runs/20240611-101500-a1b2c3/live").text   # no form where nothing runs
    r = c.post("/runs/20240611-101500-a1b2c3/stop", data={"csrf": csrf.token(User("local", "operator"))},
               headers={"Origin": "http://localhost"})
    assert r.status_code == 409 and "not running" in r.text


def test_compare_shows_the_verdict_table_and_the_fingerprint(client):
    html = client.get("/compare?a=20240611-101500-a1b2c3&b=20240611-101500-a1b2c3").text
    assert 'id="fingerprint"' in html and ("comparison" in html or "error" in html)


def test_serve_refuses_another_address_without_users_and_a_bad_users_file(tmp_path, capsys, store):
    assert main(["serve", "--store", str(store), "--listen", "0.0.0.0:8086"]) == 2
    assert "another address needs authentication" in capsys.readouterr().err
    bad = tmp_path / "users.toml"
    bad.write_text('[users.x]\nrole = "admin"\n')
    assert main(["serve", "--store", str(store), "--users", str(bad)]) == 2
    assert "role must be one of viewer, operator" in capsys.readouterr().err
    assert main(["serve", "--store", str(tmp_path / "none")]) == 2
    assert main(["serve", "--store", str(store), "--listen", "127.0.0.1:99999"]) == 2


def test_hash_password_makes_a_line_the_users_file_accepts(tmp_path, monkeypatch, capsys):
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("s3cret\n"))
    assert main(["serve", "--hash-password"]) == 0
    hashed = capsys.readouterr().out.strip()
    path = tmp_path / "users.toml"
    path.write_text(f'[users.a]\nrole = "operator"\npassword = "{hashed}"\n')
    assert Users.load(path).by_password("a", "s3cret") == User("a", "operator")
    assert Users.load(path).by_password("a", "s3cret ") is None


def test_longhaul_serve_answers_on_loopback_and_ends_on_sigint(store):
    import signal
    import socket
    import urllib.request

    from longhaul.hardware.executors.process import wait_until

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "longhaul.appliance.cli", "serve", "--store", str(store),
                             "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs", timeout=1) as r:
                    return r.status == 200
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                return False
        wait_until(answers, 30, 0.1, what="longhaul serve to answer")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0


def test_a_trial_under_way_is_shown_from_its_live_rows(store, tmp_path):
    import shutil as sh

    from longhaul.collectors.store.live_rows import LiveRows

    run = tmp_path / "run"
    sh.copytree(store / "20240612-090000-d4e5f6", run)
    trial = run / "cells" / "table2-002" / "trial-3"            # the running cell's next trial, under way
    rows = LiveRows(trial)
    for t in range(4):
        rows.tick(float(t), {"fg": {"mbps": 50.0 * t}}, 130.0)
    snap = live.snapshot(run, live=True)
    assert snap.series_of == "table2-002 / trial 3 (running: the senders' delivery rate)"
    assert snap.throughput == {"fg": [[0.0, 0.0], [1.0, 50.0], [2.0, 100.0], [3.0, 150.0]]}
    assert snap.rtt == [[0.0, 130.0], [1.0, 130.0], [2.0, 130.0], [3.0, 130.0]]
    rows.close()
    assert live.snapshot(run, live=True).series_of == "table2-002 / trial 2"     # stored: the record again


def test_a_regression_suite_s_run_is_found_by_its_suite(store, tmp_path):
    import shutil as sh

    from console_fixtures import COMPLETE, as_suite_run

    sh.copytree(store / COMPLETE, tmp_path / COMPLETE)
    as_suite_run(tmp_path / COMPLETE)
    c = TestClient(create_app(ConsoleSettings(tmp_path)), base_url="http://localhost")
    assert COMPLETE in c.get("/runs?suite=table2").text and COMPLETE not in c.get("/runs?suite=other").text


def test_the_suites_page_shows_each_suite_s_verdict_history_and_schedule(store, tmp_path):
    import shutil as sh

    from console_fixtures import COMPLETE, as_suite_run

    for k, run in enumerate((COMPLETE, "20240611-110000-a1b2c4")):
        sh.copytree(store / COMPLETE, tmp_path / run)
        for name in ("summary.json", "manifest.json"):
            doc = json.loads((tmp_path / run / name).read_text())
            doc.update(run_id=run, **({"started": f"2024-06-11T1{k}:00:00Z"} if name == "manifest.json" else {}))
            (tmp_path / run / name).write_text(json.dumps(doc))
        as_suite_run(tmp_path / run)
    html = TestClient(create_app(ConsoleSettings(tmp_path)), base_url="http://localhost").get("/suites").text
    assert 'id="suite-table2"' in html and "2 complete" in html
    assert "too few repeats" in html or "no regression" in html       # what `longhaul compare` says of them
    assert "No change point in its history." in html
    assert "not scheduled" in html or "systemd is not running here" in html or "no systemctl" in html


def test_the_lab_page_runs_longhaul_check_for_an_operator_only(store, users_file, tmp_path):
    from lab_support import write_lab_config

    config = write_lab_config(tmp_path, "[topology]\npairs = 1\n[[flows]]\nname = \"fg\"\nrole = \"foreground\"\n"
                                        "cca = \"cubic\"\nduration_s = 5\n", "one")
    csrf = Csrf(b"c" * 32)
    c = TestClient(create_app(ConsoleSettings(store, Users.load(users_file), config), csrf), base_url="http://localhost")
    viewer, operator = basic("vera", "vera-pass"), basic("otto", "otto-pass")
    origin = {"Origin": "http://localhost"}
    assert 'id="check"' not in c.get("/lab", headers=viewer).text and "Not checked" in c.get("/lab", headers=viewer).text
    assert c.post("/lab/check", data={"csrf": csrf.token(User("vera", "viewer"))}, headers={**viewer, **origin}).status_code == 403
    assert c.post("/lab/check", data={}, headers={**operator, **origin}).status_code == 403
    r = c.post("/lab/check", data={"csrf": csrf.token(User("otto", "operator"))}, headers={**operator, **origin})
    assert r.status_code == 200                                   # followed to /lab
    assert f"config {config}: valid; 1 profile(s), 1 cell(s)" in " ".join(r.text.split())
    assert 'id="check-status"' in r.text


def test_without_a_config_the_lab_page_says_how_to_give_one(client):
    assert "longhaul serve --config CONFIG" in client.get("/lab").text


@pytest.mark.skipif(not shutil.which("openssl"), reason="needs openssl to make a test certificate")
def test_longhaul_serve_over_tls_with_users_asks_for_credentials(store, users_file, tmp_path):
    import signal
    import socket
    import ssl
    import urllib.error
    import urllib.request

    from longhaul.hardware.executors.process import wait_until

    cert, key = tmp_path / "console.pem", tmp_path / "console.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "longhaul.appliance.cli", "serve", "--store", str(store),
                             "--listen", f"127.0.0.1:{port}", "--users", str(users_file),
                             "--tls-cert", str(cert), "--tls-key", str(key)], stderr=subprocess.PIPE, text=True)
    context = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}/runs"

    def status(headers: dict) -> int | None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2, context=context) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            assert proc.poll() is None, proc.stderr.read()
            return None
    try:
        wait_until(lambda: status({}) is not None, 30, 0.1, what="the console over TLS")
        assert status({}) == 401 and status(basic("vera", "vera-pass")) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
