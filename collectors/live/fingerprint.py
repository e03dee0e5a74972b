"""The environment fingerprint of every host of a lab and of the controller, for the manifest's
`fingerprint` section (collectors/store/fingerprint.py; docs/results-format.md).

Each host runs the agent (drivers/agents/fingerprint.py) through its executor, all at once, the
way the socket sampler runs its probe (`sys.executable -m ...`: a lab host has longhaul at the same
interpreter path, or the SSH executor's path map says where). A fingerprint never fails a run: a
host whose agent fails, hangs or prints something else is `{"error": "<one line>"}`.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from longhaul.collectors.store.fingerprint import CONTROLLER, section
from longhaul.collectors.store.provenance import now_iso
from longhaul.drivers.agents.fingerprint import FINGERPRINT, MODULE
from longhaul.hardware.executors.process import CommandError, Executor, LocalExecutor, ProcessTable

AGENT_TIMEOUT_S = 60.0       # the agent takes well under a second; VMs under TCG are far slower
ERROR_CHARS = 300


def agent_argv(python: str = sys.executable) -> list[str]:
    return [python, "-m", MODULE]


def parse_agent_output(stdout: str) -> dict:
    """The agent's one JSON object (the last line that is one: a login banner may come first).
    ValueError when there is none or it is not the agent's (DocumentVersionError is one)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return FINGERPRINT.read(json.loads(line), "the agent's output")
    raise ValueError(f"no fingerprint in the agent's output ({len(stdout)} characters)")


def one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 1] + "…"


def fingerprint_host(executor: Executor, timeout: float = AGENT_TIMEOUT_S) -> dict:
    """One host's fingerprint, or {"error": ...}; never raises."""
    try:
        res = executor.run(agent_argv(), timeout=timeout, check=False)
        if res.returncode != 0:
            return {"error": one_line(f"the fingerprint agent exited {res.returncode}: "
                                      f"{res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ''}")}
        return parse_agent_output(res.stdout)
    except (CommandError, ValueError) as exc:     # ssh failed, timed out, or the output was not one
        return {"error": one_line(str(exc))}
    except Exception as exc:             # whatever else went wrong on that host, the run goes on
        return {"error": one_line(f"{type(exc).__name__}: {exc}")}


def take_fingerprints(executors: dict[str, Executor], timeout: float = AGENT_TIMEOUT_S) -> dict[str, dict]:
    """Host name -> its fingerprint (or {"error"}), every host at once."""
    if not executors:
        return {}
    names = list(executors)
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        found = pool.map(lambda name: fingerprint_host(executors[name], timeout), names)
        return dict(zip(names, found))


def lab_fingerprint(executors: dict[str, Executor], lab: str | None = None,
                    timeout: float = AGENT_TIMEOUT_S) -> dict:
    """The manifest's whole section: the lab's hosts and the controller, taken at once."""
    taken = now_iso()
    found = take_fingerprints({**executors, CONTROLLER: LocalExecutor(CONTROLLER, ProcessTable())}, timeout)
    controller = found.pop(CONTROLLER)
    return section(controller, found, taken, lab)
