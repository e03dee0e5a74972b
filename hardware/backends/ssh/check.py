"""`longhaul check` on real hosts: is every machine of the inventory ready for an experiment?

Runs readiness.py's checks on every host over SSH (all hosts at once, one thread each; a host's
checks one after another, each with a timeout) and prints one table row per check. Exit status: 0
when no check failed (warnings allowed), 1 when one did; an unreadable or invalid inventory is a
ConfigError (exit 2), raised before anything is contacted.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.table import Table

from longhaul.hardware.backends.base import LabNeeds
from longhaul.hardware.backends.ssh import readiness
from longhaul.hardware.backends.ssh.host_checks import check_host
from longhaul.hardware.backends.ssh.inventory import load_inventory

_STYLE = {readiness.OK: "green", readiness.WARN: "yellow", readiness.FAIL: "bold red"}


def wants(needs: LabNeeds | None) -> readiness.Wants:
    """Which programs and congestion controls the run needs on the end hosts (None: no config)."""
    if needs is None:
        return readiness.Wants()
    return readiness.Wants(tuple(needs.executables), tuple(needs.ccas), tuple(needs.resolving_tools),
                           tuple(needs.bpf_fallback))


def run_checks(inventory, needs: LabNeeds | None = None, via=None) -> list[readiness.Row]:
    """Every host's rows, hosts in inventory order, all hosts checked at once."""
    wanted = wants(needs)
    with ThreadPoolExecutor(max_workers=min(16, len(inventory.hosts))) as pool:
        futures = [pool.submit(check_host, inventory, host, wanted, via) for host in inventory.hosts]
        return [row for f in futures for row in f.result()]


def table(rows: list[readiness.Row], title: str) -> Table:
    out = Table(title=title)
    for column in ("host", "role", "check", "status", "detail"):
        out.add_column(column, overflow="fold")
    last = None
    for row in rows:
        first = row.host != last
        last = row.host
        out.add_row(row.host if first else "", row.role if first else "", row.check,
                    f"[{_STYLE[row.status]}]{row.status}[/{_STYLE[row.status]}]", row.detail,
                    end_section=False)
    return out


def check_inventory(inventory_path, needs: LabNeeds | None, console, *, via=None) -> int:
    """Print the readiness table of the inventory's hosts; 0 when ready (warnings allowed), 1 not.
    via: an Executor that runs the ssh client (tests: inside a namespace)."""
    inventory = load_inventory(Path(inventory_path))      # ConfigError (exit 2) if it is not valid
    rows = run_checks(inventory, needs, via=via)
    console.print(table(rows, f"inventory {inventory.inventory.name}: readiness"))
    ready, words = readiness.verdict(rows)
    console.print(words if ready else f"[bold red]{words}[/bold red]")
    return 0 if ready else 1
