"""manifest.json as a record (docs/results-format.md): what a run was, where, with what.

Built once by `provenance.run_manifest` with keyword arguments (a misspelt section is a TypeError
where it is made) and changed afterwards only through the writer's `update_manifest`, which
replaces fields by name (the same check), so every mirror is handed each change. Reading follows
records.py: lenient, a missing key its default, an unknown one kept in `extra` and written back.

`features`, `tools`, `config`, `host_tuning`, `fingerprint` and `phases` stay tables: their shapes
are their owners' (a backend's preflight, the fingerprint agent, the phase clock), documented
beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from longhaul.collectors.store import format as fmt
from longhaul.collectors.store.records import OMIT_EMPTY, OMIT_NONE, DeclaredCell, Record


@dataclass(kw_only=True)
class Revision(Record):
    """The longhaul that ran: its version and the checkout's revision."""

    version: str | None = None
    git_revision: str | None = None
    git_dirty: bool | None = None


@dataclass(kw_only=True)
class HostInfo(Record):
    """The controller."""

    hostname: str | None = None
    kernel: str | None = None
    os: str | None = None


@dataclass(kw_only=True)
class ProfileSource(Record):
    """A profile as it was run (`run --resume` rebuilds its cells from `source`)."""

    path: str | None = None
    description: str | None = None
    repeats: int | None = None
    time_scale: float | None = None
    source: str | None = None


@dataclass(kw_only=True)
class RunOrder(Record):
    mode: str | None = None           # "sequential" | "random"
    seed: int | None = None


def _current_version() -> int:
    return fmt.RUN_DOC.version


@dataclass(kw_only=True)
class RunManifest(Record):
    """manifest.json, keys in the documented order; the sections after `host` are those of the
    run's kind (a profile run has them all, an OPS evaluation a `config` only)."""

    _nested: ClassVar = {"longhaul": (Revision, "one"), "host": (HostInfo, "one"),
                         "profiles": (ProfileSource, "dict"), "cells": (DeclaredCell, "list"),
                         "order": (RunOrder, "one")}
    format: str = fmt.RUN_FORMAT
    version: int = field(default_factory=_current_version)
    run_id: str | None = None
    started: str | None = None
    finished: str | None = None
    status: str | None = None             # running, complete, interrupted, failed
    kind: str | None = field(default=None, metadata=OMIT_NONE)      # runs that are not profile runs
    longhaul: Revision = field(default_factory=Revision)
    host: HostInfo = field(default_factory=HostInfo)
    backend: str | None = field(default=None, metadata=OMIT_NONE)
    features: dict | None = field(default=None, metadata=OMIT_NONE)
    tools: dict | None = field(default=None, metadata=OMIT_NONE)
    config_path: str | None = field(default=None, metadata=OMIT_NONE)
    config: dict | None = field(default=None, metadata=OMIT_NONE)
    time_scale_override: float | None = None
    profiles: dict[str, ProfileSource] = field(default_factory=dict, metadata=OMIT_EMPTY)
    cells: list[DeclaredCell] = field(default_factory=list)
    order: RunOrder | None = field(default=None, metadata=OMIT_NONE)
    pid: int | None = field(default=None, metadata=OMIT_NONE)
    fingerprint: dict | None = field(default=None, metadata=OMIT_NONE)
    host_tuning: list[dict] = field(default_factory=list, metadata=OMIT_EMPTY)
    resumed: list[str] = field(default_factory=list, metadata=OMIT_EMPTY)
    phases: dict | None = field(default=None, metadata=OMIT_NONE)

    def profile(self, name: str | None) -> ProfileSource | None:
        return self.profiles.get(name) if name is not None else None

    def declared(self, cell_id: str | None) -> DeclaredCell | None:
        return next((c for c in self.cells if c.id == cell_id), None)
