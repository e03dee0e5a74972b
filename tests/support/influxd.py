"""A real InfluxDB 1.x server (Debian's influxd) on a free loopback port for the tests, with its
data in a temporary directory; started in its own session, stopped by its pid. It can be killed
(SIGKILL), frozen (SIGSTOP) and started again on the same port and data, as the fault tests need."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

INFLUXD = shutil.which("influxd")
needs_influxd = pytest.mark.skipif(INFLUXD is None, reason="influxd not installed (make setup installs Debian's influxdb)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """A server process in its own session, its log in its directory, ready when `ready_path`
    answers `ready_status` (polled), stopped by its pid (SIGCONT first: it may be frozen)."""

    name = "server"
    ready_path, ready_status = "/ping", 204

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def _spawn(self, argv: list[str], timeout_s: float, **popen) -> None:
        log_path = self.dir / f"{self.name}.log"
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True, **popen)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {log_path.read_text()[-2000:]}")
            if self.ping():
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer {self.ready_path} within {timeout_s:g} s")

    def ping(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}{self.ready_path}", timeout=0.5) as resp:
                return resp.status == self.ready_status
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


CONFIG = """reporting-disabled = true
bind-address = "127.0.0.1:{rpc}"
[meta]
  dir = "{dir}/meta"
  logging-enabled = false
[data]
  dir = "{dir}/data"
  wal-dir = "{dir}/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  bind-address = "127.0.0.1:{port}"
  auth-enabled = {auth}
  log-enabled = false
  pprof-enabled = false
[logging]
  level = "warn"
  suppress-logo = true
"""


class InfluxServer(_Server):
    name = "influxd"

    def __init__(self, directory: Path, auth: bool = False):
        super().__init__(directory)
        self.rpc = free_port()
        self.auth = auth
        self.config = self.dir / "influxdb.conf"
        self.config.write_text(CONFIG.format(rpc=self.rpc, dir=self.dir, port=self.port, auth=str(auth).lower()))

    def start(self) -> InfluxServer:
        self._spawn([INFLUXD, "-config", str(self.config)], 30)
        return self

    def query(self, q: str, db: str | None = None, user: str | None = None, password: str | None = None,
              method: str = "POST") -> dict:
        params = {"q": q, "epoch": "ns"}
        if db:
            params["db"] = db
        auth = f"?{urllib.parse.urlencode({'u': user, 'p': password})}" if user else ""
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"{self.url}/query{auth}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def create_db(self, name: str, **auth) -> None:
        self.query(f'CREATE DATABASE "{name}"', **auth)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)


@contextmanager
def influx_server(directory: Path, database: str | None = "longhaul"):
    """A started server with `database` created (skips the test where influxd is missing); stopped
    at the end, whatever happened."""
    if INFLUXD is None:
        pytest.skip("influxd not installed (make setup installs Debian's influxdb)")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    server = InfluxServer(directory).start()
    try:
        if database:
            server.create_db(database)
        yield server
    finally:
        server.stop()


INFLUXD2 = Path(__file__).resolve().parents[2] / "build" / "test-bin" / "influxd2"
ORG, BUCKET, TOKEN = "longhaul", "longhaul", "longhaul-test-token"


class Influx2Server(_Server):
    """InfluxDB OSS 2.7 (tests/servers/build-influxd2.sh) on a free loopback port, set up with one
    org, bucket and operator token."""

    name = "influxd2"
    ready_path, ready_status = "/health", 200

    def start(self) -> Influx2Server:
        empty = self.dir / "influxd2-config.toml"
        empty.write_text("")
        self._spawn([str(INFLUXD2), "--bolt-path", str(self.dir / "influxd.bolt"),
                     "--engine-path", str(self.dir / "engine"), "--sqlite-path", str(self.dir / "influxd.sqlite"),
                     "--http-bind-address", f"127.0.0.1:{self.port}", "--reporting-disabled", "--log-level", "warn"],
                    60,
                    # influxd 2 reads a config.toml in its working directory or INFLUXD_CONFIG_PATH: not ours
                    cwd=self.dir, env={**os.environ, "INFLUXD_CONFIG_PATH": str(empty)})
        body = json.dumps({"username": "longhaul", "password": "longhaul-pass", "org": ORG, "bucket": BUCKET,
                           "token": TOKEN}).encode()
        req = urllib.request.Request(f"{self.url}/api/v2/setup", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 201
        return self


@contextmanager
def influx2_server(directory: Path):
    if not INFLUXD2.is_file():
        pytest.skip(f"no {INFLUXD2} (make test builds it: tests/servers/build-influxd2.sh)")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    server = Influx2Server(directory).start()
    try:
        yield server
    finally:
        server.stop()
