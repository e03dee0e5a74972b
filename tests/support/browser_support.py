"""A real browser for the console's tests: Debian's headless chromium through Selenium, and the
console served by uvicorn in this process (so a test's monkeypatches reach it)."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from longhaul.appliance.console.app import ConsoleSettings, create_app
from longhaul.appliance.console.auth import Csrf
from longhaul.hardware.executors.process import wait_until

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
MISSING = None if CHROMIUM and DRIVER else "needs Debian's chromium and chromium-driver (make setup installs them)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(store: Path, csrf: Csrf | None = None, **settings):
    """The console on a free loopback port (ConsoleSettings(store, **settings)), its base URL;
    stopped at the end (and with it what it started)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(ConsoleSettings(store, **settings), csrf), host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 20, 0.1, what="the console to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def chromium(*extra_args: str):
    """Headless chromium (with extra command-line switches, e.g. --host-resolver-rules); its
    temporary files (it leaves a folder in TMPDIR per session) go to a folder of this session's,
    removed at its end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    scratch = tempfile.TemporaryDirectory(prefix="lh-chromium-")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1360,1000",
                *extra_args):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingOptions", {"browser": "ALL"})
    options.add_argument(f"--user-data-dir={scratch.name}/profile")
    driver = webdriver.Chrome(service=Service(DRIVER, env={**os.environ, "TMPDIR": scratch.name}), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        scratch.cleanup()


def _axes(browser, figure: str) -> tuple[list[float], list[float]]:
    """A live page figure's axes as its svg states them: (t0 t1 v0 v1), (x0 x1 y0 y1)."""
    svg = browser.find_element("id", figure)
    return ([float(v) for v in svg.get_attribute("data-domain").split()],
            [float(v) for v in svg.get_attribute("data-range").split()])


def drawn(browser, figure: str = "throughput") -> dict[str, list[tuple[float, float]]]:
    """A live page figure's lines as drawn: per line, its points read back from the polyline's
    pixels through the figure's own axes (the svg's data-domain and data-range)."""
    (t0, t1, v0, v1), (x0, x1, y0, y1) = _axes(browser, figure)
    lines = browser.execute_script(
        "return [...document.getElementById(arguments[0]).querySelectorAll('polyline')]"
        ".map(p => [p.dataset.flow, p.getAttribute('points')])", figure)
    out = {}
    for name, points in lines:
        pairs = [tuple(map(float, p.split(","))) for p in points.split()]
        out[name] = [(t0 + (x - x0) / (x1 - x0) * (t1 - t0), v0 + (y - y0) / (y1 - y0) * (v1 - v0)) for x, y in pairs]
    return out


def pixel(browser, figure: str = "throughput") -> tuple[float, float]:
    """What a tenth of a pixel (the precision of a drawn point) is worth on each axis of a figure."""
    (t0, t1, v0, v1), (x0, x1, y0, y1) = _axes(browser, figure)
    return 0.06 * abs((t1 - t0) / (x1 - x0)), 0.06 * abs((v1 - v0) / (y1 - y0))


def assert_drawn_is(browser, throughput, rtt=None) -> None:
    """The live page's figures hold the store's values: every flow's per-second throughput (and the
    probe's RTT), point by point, to the tenth of a pixel a point is drawn at."""
    for figure, lines in (("throughput", throughput), ("rtt", {"probe": rtt} if rtt is not None else None)):
        if lines is None:
            continue
        got, (dt, dv) = drawn(browser, figure), pixel(browser, figure)
        assert set(got) == set(lines), (figure, set(got), set(lines))
        for name, (t, v) in lines.items():
            points = got[name]
            assert len(points) == len(t), (figure, name, len(points), len(t))
            for (pt, pv), st, sv in zip(points, t, v, strict=True):
                assert abs(pt - st) <= dt and abs(pv - sv) <= dv, (figure, name, (pt, pv), (st, sv), (dt, dv))
