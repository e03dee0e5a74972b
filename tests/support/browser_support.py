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
from longhaul.hardware.executors.process import wait_until

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
MISSING = None if CHROMIUM and DRIVER else "needs Debian's chromium and chromium-driver (make setup installs them)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(store: Path, **settings):
    """The console on a free loopback port (ConsoleSettings(store, **settings)), its base URL;
    stopped at the end (and with it what it started)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(ConsoleSettings(store, **settings)), host="127.0.0.1", port=port,
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
def chromium():
    """Headless chromium; its temporary files (it leaves a folder in TMPDIR per session) go to a
    folder of this session's, removed at its end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    scratch = tempfile.TemporaryDirectory(prefix="lh-chromium-")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1360,1000"):
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


def drawn(browser) -> dict[str, int]:
    """The live page's throughput figure: points per flow, as drawn."""
    return browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#throughput polyline')]"
        ".map(p => [p.dataset.flow, Number(p.dataset.points)]))")
