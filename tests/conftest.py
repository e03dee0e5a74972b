"""Fixtures every test gets, and the suite's layout.

tests/<layer>/ holds the tests of one layer of the product (drivers, hardware, collectors,
studies, reports, appliance: docs/architecture.md's layers); tests/system/ runs the whole product
on a real lab (namespaces, or VMs booted from the image; marked `lab`). tests/support/ holds the
helpers they import (fakes, lab_support, influxd, ...: on the path through pyproject's
pythonpath), tests/data/ the captured real output the drivers' parsers are tested on, and
tests/servers/ what builds the servers the tests run (InfluxDB 2)."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import ci_summary
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a lab or VM test that skips fails, unless marked `hardware` (ci_summary)."""
    outcome = yield
    ci_summary.fail_hidden_skip(outcome.get_result())


def pytest_terminal_summary(terminalreporter, config):
    """Each pass's counts and skips, for .ci/run's closing summary (LONGHAUL_TEST_RESULTS=DIR)."""
    folder = os.environ.get(ci_summary.RESULTS_ENV)
    if folder and not hasattr(config, "workerinput"):           # the xdist controller, or a plain run
        name = (config.getoption("markexpr") or "all").replace(" ", "-")
        ci_summary.write_pass(terminalreporter.stats, Path(folder), name)


@pytest.fixture(autouse=True)
def _no_leaked_log_handlers():
    """The runner adds a run.log handler to the root logger for its run and removes it at the end,
    however the run ended: nothing it added may be left, after any test."""
    before = list(logging.getLogger().handlers)
    yield
    leaked = [h for h in logging.getLogger().handlers if h not in before]
    for handler in leaked:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert not leaked, leaked
