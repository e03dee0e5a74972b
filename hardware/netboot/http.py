"""The netboot HTTP server: a fixed table of paths, nothing else, every request logged.

    python -m longhaul.hardware.netboot.http SITE.json

SITE.json (hardware/netboot/server.py writes it): {"bind", "port", "log", "files": {path: file},
"texts": {path: text}, "owners": {path: client address}}. A path not in the table is 404 (no
directory is ever listed or walked, so nothing outside it can be asked for); a path with an owner
(a host's seed, which holds its private host key) is served to that address only. Each request is
one JSON line in "log": when, who, what, the status and the bytes sent. Python's own
ThreadingHTTPServer: boot files are few and large, and a lab boots a handful of hosts at once.
"""
from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 1 << 20


class Site:
    def __init__(self, data: dict):
        self.files = {k: Path(v) for k, v in data.get("files", {}).items()}
        self.texts = {k: v.encode() for k, v in data.get("texts", {}).items()}
        self.owners = dict(data.get("owners", {}))
        self.log_path = Path(data["log"])
        self._lock = threading.Lock()

    def record(self, **entry) -> None:
        with self._lock, open(self.log_path, "a") as f:
            f.write(json.dumps({"t": round(time.time(), 3), **entry}) + "\n")


def handler_for(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "longhaul-netboot"
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):        # noqa: A002 (the base class's name)
            pass                                        # each request is logged as JSON instead

        def do_HEAD(self):
            self._answer(body=False)

        def do_GET(self):
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            path, client = self.path.split("?", 1)[0], self.client_address[0]
            owner = site.owners.get(path)
            if owner is not None and owner != client:
                return self._refuse(403, path, client, f"served to {owner} only")
            if path in site.texts:
                data = site.texts[path]
                self._head(200, len(data), "text/plain")
                if body:
                    self.wfile.write(data)
                site.record(client=client, path=path, status=200, bytes=len(data) if body else 0)
                return
            file = site.files.get(path)
            if file is None or not file.is_file():
                return self._refuse(404, path, client, "not served")
            size = file.stat().st_size
            self._head(200, size, "application/octet-stream")
            sent = 0
            if body:
                with open(file, "rb") as f:
                    shutil.copyfileobj(f, self.wfile, CHUNK)
                sent = size
            site.record(client=client, path=path, status=200, bytes=sent)

        def _head(self, status: int, length: int, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(length))
            self.end_headers()

        def _refuse(self, status: int, path: str, client: str, why: str) -> None:
            data = (why + "\n").encode()
            self._head(status, len(data), "text/plain")
            self.wfile.write(data)
            site.record(client=client, path=path, status=status, bytes=0)

    return Handler


def main(argv: list[str]) -> int:
    data = json.loads(Path(argv[0]).read_text())
    site = Site(data)
    server = ThreadingHTTPServer((data["bind"], int(data["port"])), handler_for(site))
    server.daemon_threads = True
    site.record(client="", path="", status=0, bytes=0, note=f"listening on {data['bind']}:{data['port']}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
