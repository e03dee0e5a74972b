"""A fake lab backend for root-less tests of the middle: runner, trial, verification and the store.

FakeBackend honours the backend contract (hardware/backends/base.py): a session builds FakeLabs
(fake_lab.py), which execute nothing and answer with canned output of the real tools.

Register it for a test with `use_fake_backend(monkeypatch, FakeBackend(...))` and a config with
`[lab] backend = "fake"` (write_fake_config).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fake_lab import FakeLab, FakePath
from lab_support import write_lab_config

from longhaul.core.model import Strict
from longhaul.hardware.backends.base import LabNeeds, LabSpec, Readiness, RunContext
from longhaul.hardware.backends.registry import BACKENDS
from longhaul.hardware.cleanup import CleanupStack

NAME = "fake"


@dataclass
class FakeFeatures:
    delay: str = "fake"

    def as_dict(self) -> dict:
        return {"fake": True, "delay": self.delay, "congestion_controls": list(FakeSession.congestion_controls)}


@dataclass
class FakeSession:
    path: FakePath
    features: FakeFeatures = field(default_factory=FakeFeatures)
    labs: list[FakeLab] = field(default_factory=list)
    runs_tools_here = False                       # nothing runs here, so no program is looked for
    congestion_controls = ("reno", "cubic", "bbr")

    def lab(self, spec: LabSpec, tag: str, cleanup: CleanupStack, workdir: Path) -> FakeLab:
        lab = FakeLab(spec, tag, self.path, workdir)
        cleanup.push(f"tear down fake lab {tag}", lambda: setattr(lab, "torn_down", True))
        self.labs.append(lab)
        return lab


class FakeSettings(Strict):
    """[lab] backend = "fake" takes no other keys."""


class FakeBackend:
    """The backend contract; `sessions` keeps every session for the test to inspect."""

    name = NAME
    settings = FakeSettings
    generator_how = "FakePath(generator=True)"

    def __init__(self, path: FakePath | None = None):
        self.path = path or FakePath()
        self.sessions: list[FakeSession] = []

    def configure(self, settings: FakeSettings, config_dir: Path) -> FakeSettings:
        return settings

    def has_generator(self, configured) -> bool:
        return self.path.generator

    def leftovers(self, remove: bool) -> list[str]:
        return []           # a fake lab leaves nothing on the machine

    def check(self, configured, needs: LabNeeds, console) -> Readiness:
        return Readiness(True, runs_tools_here=False, congestion_controls=FakeSession.congestion_controls)

    @contextmanager
    def session(self, configured, needs: LabNeeds, ctx: RunContext):
        session = FakeSession(self.path)
        self.sessions.append(session)
        yield session

    @property
    def labs(self) -> list[FakeLab]:
        return [lab for s in self.sessions for lab in s.labs]


def use_fake_backend(monkeypatch, backend: FakeBackend | None = None) -> FakeBackend:
    backend = backend or FakeBackend()
    monkeypatch.setitem(BACKENDS, NAME, backend)
    return backend


# A tiny profile: two 1-second iperf3 flows sharing a 100 Mb/s, 20 ms bottleneck, twice.
TINY_PROFILE = """
[profile]
description = "fake lab: two flows"
repeats = 2

[topology]
pairs = 2
access_rate_mbps = 1000
bottleneck_rate_mbps = 100
rtt_ms = 20
queue = "1bdp"

[[flows]]
name = "fg"
role = "foreground"
cca = "cubic"
duration_s = 1

[[flows]]
name = "bg"
role = "background"
pair = 2
cca = "bbr"
duration_s = 1
"""


def write_fake_config(tmp: Path, profile_text: str = TINY_PROFILE, name: str = "tiny", verify: str = "") -> Path:
    """config.toml and profiles/<name>.toml for the fake backend; verification tries once."""
    config = write_lab_config(tmp, profile_text, name,
                              verify="rate_probe_s = 1.0\nattempts = 1\nretry_pause_s = 0\n" + verify)
    config.write_text(f'[lab]\nbackend = "{NAME}"\n' + config.read_text())
    return config

