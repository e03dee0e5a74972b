"""Fixtures every test gets, and the suite's layout.

tests/<layer>/ holds the tests of one layer of the product (drivers, hardware, collectors,
studies, reports, appliance: docs/architecture.md's layers); tests/system/ runs the whole product
on a real lab (namespaces, or VMs booted from the image; marked `lab`). tests/support/ holds the
helpers they import (fakes, lab_support, influxd, ...: on the path through pyproject's
pythonpath), tests/data/ the captured real output the drivers' parsers are tested on, and
tests/servers/ what builds the servers the tests run (InfluxDB 2)."""
from __future__ import annotations

import logging

import pytest


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
