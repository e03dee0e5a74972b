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


class InfluxServer:
    def __init__(self, directory: Path, auth: bool = False):
        self.dir = Path(directory)
        self.port, self.rpc = free_port(), free_port()
        self.auth = auth
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.config = self.dir / "influxdb.conf"
        self.config.write_text(CONFIG.format(rpc=self.rpc, dir=self.dir, port=self.port, auth=str(auth).lower()))

    def start(self) -> InfluxServer:
        log = (self.dir / "influxd.log").open("ab")
        self.proc = subprocess.Popen([INFLUXD, "-config", str(self.config)], stdout=log, stderr=log,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"influxd exited: {(self.dir / 'influxd.log').read_text()[-2000:]}")
            if self.ping():
                return self
            time.sleep(0.05)
        raise RuntimeError("influxd did not answer /ping within 30 s")

    def ping(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/ping", timeout=0.5) as resp:
                return resp.status == 204
        except (urllib.error.URLError, OSError):
            return False

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

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


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


INFLUXD2 = Path(__file__).resolve().parents[1] / "build" / "test-bin" / "influxd2"
ORG, BUCKET, TOKEN = "longhaul", "longhaul", "longhaul-test-token"


class Influx2Server:
    """InfluxDB OSS 2.7 (tests/servers/build-influxd2.sh) on a free loopback port, set up with one
    org, bucket and operator token."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Influx2Server:
        log = (self.dir / "influxd2.log").open("ab")
        self.proc = subprocess.Popen(
            [str(INFLUXD2), "--bolt-path", str(self.dir / "influxd.bolt"), "--engine-path", str(self.dir / "engine"),
             "--sqlite-path", str(self.dir / "influxd.sqlite"), "--http-bind-address", f"127.0.0.1:{self.port}",
             "--reporting-disabled", "--log-level", "warn"], stdout=log, stderr=log, start_new_session=True,
            # influxd 2 reads a config.toml in its working directory or INFLUXD_CONFIG_PATH: not ours
            cwd=self.dir, env={**os.environ, "INFLUXD_CONFIG_PATH": str(self._empty_config())})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"influxd2 exited: {(self.dir / 'influxd2.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=0.5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError("influxd2 did not answer /health within 60 s")
        body = json.dumps({"username": "longhaul", "password": "longhaul-pass", "org": ORG, "bucket": BUCKET,
                           "token": TOKEN}).encode()
        req = urllib.request.Request(f"{self.url}/api/v2/setup", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 201
        return self

    def _empty_config(self) -> Path:
        path = self.dir / "influxd2-config.toml"
        path.write_text("")
        return path

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


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
