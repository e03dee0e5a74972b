"""The console answers only the host names it was started for (DNS rebinding), takes state changes
only from its own pages, and serves nothing outside the store: raw HTTP requests to a real uvicorn,
so no client library normalises a path or a header on the way. The same in a real browser:
tests/system/test_console_browser.py."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
from browser_support import served
from console_fixtures import COMPLETE, console_store
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from longhaul.appliance.cli.app import main
from longhaul.appliance.console.app import ConsoleSettings, create_app
from longhaul.appliance.console.hosts import MISDIRECTED, AllowedHosts, HostPort, split_host


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return console_store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def console(store):
    with served(store) as url:
        yield url


def raw(url: str, request: bytes, read_s: float = 5.0) -> tuple[int, bytes]:
    """One request as bytes on a socket; (status, whole answer)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=read_s) as s:
        s.sendall(request)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data and b"text/event-stream" in data:
                    break                       # a stream that was let through would never end
        except TimeoutError:
            pass
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return status, data


def get(url: str, path: str, host: str | None) -> tuple[int, bytes]:
    header = f"Host: {host}\r\n" if host is not None else ""
    return raw(url, f"GET {path} HTTP/1.1\r\n{header}Connection: close\r\n\r\n".encode())


@pytest.mark.parametrize("value,expected", [
    ("localhost:8086", HostPort("localhost", 8086)), ("LocalHost", HostPort("localhost", None)),
    ("127.0.0.1:1", HostPort("127.0.0.1", 1)), ("[::1]:8086", HostPort("::1", 8086)), ("[::1]", HostPort("::1", None)),
    ("", None), ("::1", None), ("[::1]x", None), ("a:b", None), ("a:0", None), ("a:70000", None),
    ("user@localhost", None), ("localhost/x", None), ("local host", None), ("[]:80", None),
])
def test_a_host_header_is_split_into_its_name_and_port(value, expected):
    assert split_host(value) == expected


def test_the_allowed_names_are_the_listen_address_localhost_and_the_given_ones():
    assert AllowedHosts.of("127.0.0.1").names == {"127.0.0.1", "localhost"}
    assert AllowedHosts.of("0.0.0.0", ["Console.Lab"]).names == {"localhost", "console.lab"}   # no wildcard
    allowed = AllowedHosts.of("::1")
    assert allowed.allows("[::1]:8086") and allowed.allows("localhost:9000")      # a tunnel's own port
    assert not allowed.allows("attacker.example:8086") and not allowed.allows("localhost.attacker.example")
    assert not allowed.allows("127.0.0.1:8086")                                  # not what it listens on
    # an origin: an allowed name, and the host and port the request went to, whatever the Host says
    assert allowed.same_origin("http://localhost:9000", "localhost:9000")
    assert allowed.same_origin("https://localhost", "localhost:443")
    assert not allowed.same_origin("http://localhost:9001", "localhost:9000")     # another local site
    assert not allowed.same_origin("http://attacker.example:9000", "attacker.example:9000")
    assert not allowed.same_origin("null", "localhost:9000") and not allowed.same_origin("", "localhost:9000")
    assert not allowed.same_origin("ftp://localhost:9000", "localhost:9000")


def _concrete(path: str) -> str:
    return (path.replace("{run}", COMPLETE).replace("{cell}", "table2-001").replace("{plan}", "day-1"))


def test_a_foreign_host_is_refused_on_every_route_before_it_runs(store):
    app = create_app(ConsoleSettings(store))
    routes = [(m, _concrete(r.path)) for r in app.routes if isinstance(r, Route) for m in sorted(r.methods or ())
              if m != "HEAD"] + [("GET", _concrete(r.path) + "/console.css") for r in app.routes if isinstance(r, Mount)]
    assert len(routes) >= 19 and ("POST", f"/runs/{COMPLETE}/stop") in routes
    c = TestClient(app, base_url="http://attacker.example:8086")
    for method, path in routes:
        r = c.request(method, path, data={"csrf": "x"}, headers={"Origin": "http://attacker.example:8086"},
                      follow_redirects=False)
        assert r.status_code == MISDIRECTED and COMPLETE not in r.text, (method, path)
    ok = TestClient(app, base_url="http://localhost:8086")
    assert ok.get("/runs").status_code == 200 and ok.get("/static/console.css").status_code == 200


def test_raw_requests_with_a_foreign_missing_or_doubled_host_get_421(console):
    port = console.rsplit(":", 1)[1]
    status, body = get(console, "/runs", f"attacker.example:{port}")
    assert status == MISDIRECTED and COMPLETE.encode() not in body
    status, body = get(console, f"/runs/{COMPLETE}/live/events", f"attacker.example:{port}")
    assert status == MISDIRECTED and b"text/event-stream" not in body and b"data:" not in body
    assert get(console, "/runs", None)[0] in (400, MISDIRECTED)                    # HTTP/1.1 without Host
    assert raw(console, b"GET /runs HTTP/1.0\r\n\r\n")[0] == MISDIRECTED           # HTTP/1.0, no Host at all
    doubled = f"GET /runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: attacker.example\r\nConnection: close\r\n\r\n"
    assert raw(console, doubled.encode())[0] in (400, MISDIRECTED)
    form = "csrf=x"
    post = (f"POST /runs/{COMPLETE}/stop HTTP/1.1\r\nHost: attacker.example:{port}\r\nOrigin: http://attacker.example:{port}\r\n"
            f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(form)}\r\nConnection: close\r\n\r\n{form}")
    assert raw(console, post.encode())[0] == MISDIRECTED
    status, body = get(console, "/runs", f"localhost:{int(port) + 1}")             # an ssh -L tunnel's port
    assert status == 200 and COMPLETE.encode() in body


@pytest.mark.parametrize("path", [
    "/runs/..%2f..%2f..%2fetc%2fpasswd", "/runs/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/runs/%252e%252e%252fetc%252fpasswd",
    "/runs/..%252f..%252fetc%252fpasswd", f"/runs/{COMPLETE}/cells/..%2f..%2f..%2fetc%2fpasswd",
    f"/runs/{COMPLETE}/cells/%252e%252e%252fmanifest.json", "/static/..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/static/%2e%2e/app.py", "/static/%252e%252e%252fapp.py", "/static/../app.py", "/plans/..%2f..%2fetc%2fpasswd",
    "/runs/%2fetc%2fpasswd", "/runs/..", "/runs/%2e%2e", "/runs/%00", "/runs/not-a-run",
])
def test_encoded_and_double_encoded_traversal_serves_nothing_outside_the_store(console, path):
    status, body = get(console, path, "localhost")
    assert status in (400, 404), (path, status)
    assert b"root:" not in body and b"create_app" not in body and b'"run_id"' not in body


def test_serve_needs_users_behind_a_proxy_another_name_or_a_wildcard_address(store, tmp_path, capsys):
    users = tmp_path / "users.toml"
    users.write_text('[users.a]\nrole = "viewer"\ntoken_sha256 = "' + "0" * 64 + '"\n')
    refused = [
        (["--proxied", "--allowed-host", "console.lab"], "--users as well"),
        (["--allowed-host", "console.lab"], "a loopback name, or give --users"),
        (["--users", str(users), "--listen", "0.0.0.0:8086"], "--allowed-host NAME for each name"),
        (["--users", str(users), "--proxied"], "the Host the proxy forwards"),
        (["--allowed-host", "localhost:8086"], "without a port or scheme"),
        (["--allowed-host", "http://x"], "without a port or scheme"),
    ]
    for extra, why in refused:
        assert main(["serve", "--store", str(store), *extra]) == 2, extra
        assert why in capsys.readouterr().err, extra

