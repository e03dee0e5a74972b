"""The console's start page (an operator starts a profile or a suite as a process of the console's
own) and its planning page (the plans `longhaul plan` wrote, shown as their report). A real start
on the embedded lab, watched and stopped in a browser, is in tests/system/test_console_live_lab.py."""
from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from console_fixtures import console_store
from lab_support import write_lab_config
from starlette.testclient import TestClient

from longhaul.appliance.console import starts as starts_mod
from longhaul.appliance.console.app import ConsoleSettings, create_app
from longhaul.appliance.console.auth import Csrf, User, Users, hash_password
from longhaul.collectors.store.format import MANIFEST
from longhaul.hardware import run_marker

RUN_ID = "20240611-101500-a1b2c3"
PROFILE = '[topology]\npairs = 1\n[[flows]]\nname = "fg"\nrole = "foreground"\ncca = "cubic"\nduration_s = 5\n'
SUITE = (PROFILE.replace("[topology]\n", "[topology]\naccess_rate_mbps = 1000\nbottleneck_rate_mbps = 100\n")
         + '[[scenarios]]\nname = "calibration"\ncalibration = true\nflows = ["fg"]\n'
           'set = { "topology.rtt_ms" = 0, "topology.bottleneck_rate_mbps" = 1000 }\n'
         + '[[scenarios]]\nname = "base"\nflows = ["fg"]\n')


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return console_store(tmp_path_factory.mktemp("store"))


@pytest.fixture
def lab(tmp_path) -> Path:
    config = write_lab_config(tmp_path, PROFILE, "one")
    (tmp_path / "profiles" / "nightly.toml").write_text(SUITE)
    (tmp_path / "profiles" / "broken.toml").write_text("[topology]\npairs = -1\n")
    return config


def _basic(name: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


def test_the_start_page_offers_each_profile_and_says_which_do_not_load(store, lab):
    offered = {s.name: s for s in starts_mod.startables(lab)}
    assert offered["one"].cells == 1 and not offered["one"].suite and not offered["one"].problem
    assert offered["nightly"].suite
    assert "pairs" in offered["broken"].problem
    html = TestClient(create_app(ConsoleSettings(store, config=lab)), base_url="http://localhost").get("/start").text
    assert '<option value="one">' in html and '<option value="broken">' not in html
    assert "does not load" in html


def test_starting_needs_an_operator_a_token_and_a_known_profile(store, lab, tmp_path):
    users = tmp_path / "users.toml"
    users.write_text(f'[users.vera]\nrole = "viewer"\npassword = "{hash_password("v")}"\n'
                     f'[users.otto]\nrole = "operator"\npassword = "{hash_password("o")}"\n')
    csrf = Csrf(b"s" * 32)
    c = TestClient(create_app(ConsoleSettings(store, Users.load(users), lab, tmp_path / "logs"), csrf),
                   base_url="http://localhost")
    origin = {"Origin": "http://localhost"}
    viewer, operator = _basic("vera", "v"), _basic("otto", "o")
    token = csrf.token(User("otto", "operator"))
    assert 'id="start-form"' not in c.get("/start", headers=viewer).text
    assert c.post("/start", data={"csrf": csrf.token(User("vera", "viewer")), "kind": "profile", "name": "one"},
                  headers={**viewer, **origin}).status_code == 403
    assert c.post("/start", data={"kind": "profile", "name": "one"}, headers={**operator, **origin}).status_code == 403
    assert c.post("/start", data={"csrf": token, "kind": "profile", "name": "one"},
                  headers={**operator, "Origin": "http://elsewhere.test"}).status_code == 403
    for kind, name, why in (("profile", "../../etc/passwd", "no startable profile"),
                            ("profile", "broken", "no startable profile"),
                            ("suite", "one", "not a regression suite"), ("shell", "one", "a profile or a suite")):
        r = c.post("/start", data={"csrf": token, "kind": kind, "name": name}, headers={**operator, **origin})
        assert r.status_code == 409 and why in r.text, (kind, name)
    assert not list((tmp_path / "logs").glob("*.log"))             # nothing was started


@pytest.fixture
def no_live_run(monkeypatch):
    """No run live on this controller, whatever else runs on the machine meanwhile."""
    monkeypatch.setattr(starts_mod, "live_runs", lambda: [])


def test_a_start_is_a_process_of_the_console_s_own_with_its_output_kept(store, lab, tmp_path, monkeypatch,
                                                                        no_live_run):
    # the run's own command is replaced by one that is refused as a bad config is (exit 2), so the
    # console's part is tested without a lab: the argv, the process, its log and its status
    argv_seen, real = [], starts_mod.Starts.argv

    def refused(self, kind, name):
        argv_seen.append(real(self, kind, name))
        return [sys.executable, "-c", "import sys; print('profiles/one.toml:3: [topology] pairs: refused'); sys.exit(2)"]

    monkeypatch.setattr(starts_mod.Starts, "argv", refused)
    with TestClient(create_app(ConsoleSettings(store, config=lab, start_logs=tmp_path / "logs")), base_url="http://localhost") as c:
        r = c.post("/start", data={"csrf": "", "kind": "suite", "name": "nightly"}, headers={"Origin": "http://localhost"},
                   follow_redirects=False)
        assert r.status_code == 403                                 # the local operator needs the token too
        token = c.get("/start").text.split('name="csrf" value="')[1].split('"')[0]
        r = c.post("/start", data={"csrf": token, "kind": "suite", "name": "nightly"},
                   headers={"Origin": "http://localhost"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/start#start-1"
        page = c.get("/start").text
    assert "ended (exit 2)" in page and "pairs: refused" in page
    assert argv_seen == [[sys.executable, "-m", "longhaul.appliance.cli", "suite", "nightly", "--config", str(lab),
                          "--out", str(store)]]
    assert (tmp_path / "logs" / "start-1-nightly.log").read_text().startswith("profiles/one.toml:3")


def test_one_lab_run_at_a_time_and_the_console_ends_what_it_started(store, lab, tmp_path, monkeypatch, no_live_run):
    monkeypatch.setattr(starts_mod, "FOUND_WAIT_S", 0.2)
    monkeypatch.setattr(starts_mod.Starts, "argv", lambda self, kind, name: [
        sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); time.sleep(60)"])
    runner = starts_mod.Starts(lab, store, tmp_path / "logs")
    first = runner.start("profile", "one")
    assert first.status is None
    with pytest.raises(starts_mod.StartRefused, match="has not ended"):
        runner.start("profile", "one")
    runner.close()                                                  # as the console's shutdown does
    assert first.status == 130
    # a run live on the controller that this console did not start refuses a start too
    marker = run_marker.Marker("abc123", 4242, store / RUN_ID)
    monkeypatch.setattr(starts_mod, "live_runs", lambda: [marker])
    with pytest.raises(starts_mod.StartRefused, match=f"a run is live on this controller \\({RUN_ID}, pid 4242\\)"):
        runner.start("profile", "one")


def test_a_started_run_is_found_once_its_store_is_there_not_at_its_marker(lab, tmp_path, monkeypatch):
    """The session marks the run before the runner writes its manifest: a live page opened then was
    a 404 the browser kept (CI, 2026-11-28: the operator's page never showed the trial)."""
    monkeypatch.setattr(run_marker, "STATE_DIR", tmp_path / "markers")
    monkeypatch.setattr(starts_mod.Starts, "argv", lambda self, kind, name: [
        sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); time.sleep(60)"])
    out = tmp_path / "runs"
    runner = starts_mod.Starts(lab, out, tmp_path / "logs")
    monkeypatch.setattr(starts_mod, "FOUND_WAIT_S", 0.0)
    started = runner.start("profile", "one")
    try:
        run_dir = out / RUN_ID
        run_dir.mkdir(parents=True)
        run_marker.STATE_DIR.mkdir()
        (run_marker.STATE_DIR / "a1b2c3.json").write_text(json.dumps({"pid": started.proc.pid, "run_dir": str(run_dir)}))
        assert runner.find_run(started, 0.3) is None                 # marked, no manifest yet
        (run_dir / MANIFEST).write_text("{}")
        assert runner.find_run(started, 0.3) == run_dir
    finally:
        runner.close()


def test_the_planning_page_lists_plans_and_shows_each_as_its_report(store, tmp_path):
    from longhaul.appliance.cli.app import main

    plans = tmp_path / "plans"
    assert main(["plan", "--synthetic", "1", "--out", str(plans / "day-1"), "--format", "html"]) == 0
    (plans / "odd").mkdir()
    (plans / "odd" / "plan.json").write_text(json.dumps({"format": "longhaul-plan", "version": 9}))
    c = TestClient(create_app(ConsoleSettings(store, plans=plans)), base_url="http://localhost")
    listing = c.get("/plans").text
    assert '<a href="/plans/day-1">day-1</a>' in listing and "does not read" in listing
    assert "transfers slow by" in listing                           # the plan's headline
    page = c.get("/plans/day-1")
    assert page.status_code == 200 and "<svg" in page.text
    assert (plans / "day-1" / "plan.html").read_text().count("<svg") == page.text.count("<svg")
    odd = c.get("/plans/odd")
    assert odd.status_code == 422 and "version 9" in odd.text
    for bad in ("/plans/%2e%2e", "/plans/%2e%2e%2fetc", "/plans/nothing", "/plans/.hidden"):
        assert c.get(bad).status_code == 404, bad


def test_a_profile_named_with_shell_metacharacters_is_started_as_one_argument_by_no_shell(
        store, lab, tmp_path, monkeypatch, no_live_run):
    name = "x;touch PWNED;$(touch PWNED2)`touch PWNED3`|cat&"
    (lab.parent / "profiles" / f"{name}.toml").write_text(PROFILE)
    seen, recorder = tmp_path / "argv.json", tmp_path / "recorder.py"
    # stands for the interpreter: records the argv it was given and exits as a refused config does
    recorder.write_text("import json, sys\nopen(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))\nsys.exit(2)\n")
    real = starts_mod.Starts.argv
    monkeypatch.setattr(starts_mod.Starts, "argv",
                        lambda self, kind, n: [sys.executable, str(recorder), str(seen), *real(self, kind, n)[1:]])
    monkeypatch.chdir(tmp_path)
    csrf = Csrf(b"m" * 32)
    with TestClient(create_app(ConsoleSettings(store, config=lab, start_logs=tmp_path / "logs"), csrf),
                    base_url="http://localhost") as c:
        assert 'value="x;touch PWNED;$(touch PWNED2)`touch PWNED3`|cat&amp;"' in c.get("/start").text
        r = c.post("/start", data={"csrf": csrf.token(User("local", "operator")), "kind": "profile", "name": name},
                   headers={"Origin": "http://localhost"}, follow_redirects=False)
        assert r.status_code == 303                     # started, and ended at once (the recorder's exit 2)
    argv = json.loads(seen.read_text())
    assert argv[argv.index("--profile") + 1] == name and argv[:2] == ["-m", "longhaul.appliance.cli"]
    assert not any((where / p).exists() for where in (tmp_path, lab.parent) for p in ("PWNED", "PWNED2", "PWNED3"))
