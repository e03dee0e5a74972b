"""config.toml: which lab, where results go, which profiles run, what the report looks like."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field

from longhaul.appliance.config.profiles import Profile, find_profile, load_profile
from longhaul.collectors.store.influx.settings import NO_CREDENTIAL, Credential, InfluxSettings, resolve_credential
from longhaul.core.errors import ConfigError, SettingError
from longhaul.core.model import Strict
from longhaul.core.tomlsource import load
from longhaul.core.validation import validate
from longhaul.hardware import host_watch
from longhaul.hardware.backends.base import Backend
from longhaul.hardware.backends.registry import BACKENDS


class LabSection(Strict):
    """Which lab backend runs the profiles (hardware/backends/registry.py); the backend's own keys
    beside `backend` are validated by its settings model (see load_config)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    backend: str = "netns"


class StoreSection(Strict):
    dir: str = "runs"
    influx: InfluxSettings | None = None   # a second store (docs/telemetry.md); the files are always written


class HostCheck(Strict):
    """How a trial watches its remote hosts (hardware/host_watch.py): each is asked to answer every
    period_s, given timeout_s; after `misses` unanswered checks in a row it is lost, so a host that
    went is named within about misses x (period_s + timeout_s)."""

    period_s: float = Field(host_watch.PERIOD_S, gt=0, le=300)
    timeout_s: float = Field(host_watch.TIMEOUT_S, gt=0, le=300)
    misses: int = Field(host_watch.MISSES, ge=1, le=20)


class RunSection(Strict):
    profiles: list[str] = Field(["quickstart"], min_length=1)
    profile_dir: str = "profiles"
    # "random" shuffles all trials of the run (seeded, the seed is recorded) so slow drift of the
    # host cannot line up with a sweep axis; labs are rebuilt only when the topology changes
    order: Literal["sequential", "random"] = "sequential"
    seed: int | None = Field(None, ge=0)
    # a lab host lost during a trial (appliance/run/runner.py): end the run, or go on without it
    on_host_failure: Literal["stop", "continue"] = "stop"
    host_check: HostCheck = HostCheck()


class ReportSection(Strict):
    formats: list[Literal["html", "pdf"]] = ["html", "pdf"]


class VerifySection(Strict):
    """How far the realised lab may be from its configuration before a cell is refused."""

    rtt_tolerance_ms: float = Field(2.0, ge=0)
    rtt_tolerance_pct: float = Field(3.0, ge=0)
    rate_tolerance_pct: float = Field(5.0, ge=0)
    rate_probe_s: float = Field(2.0, gt=0, le=60)     # seconds of a saturated shaper to read its rate over
    attempts: int = Field(3, ge=1, le=10)
    retry_pause_s: float = Field(10.0, ge=0, le=600)
    enabled: bool = True


class ConfigFile(Strict):
    lab: LabSection = LabSection()
    store: StoreSection = StoreSection()
    run: RunSection = RunSection()
    report: ReportSection = ReportSection()
    verify: VerifySection = VerifySection()


@dataclass(frozen=True)
class Config:
    path: Path
    data: ConfigFile
    raw: dict
    profiles: list[Profile]
    time_scale: float | None = None       # the command line's override, if any
    profile_dir_override: Path | None = None
    lab: Any = None                       # the backend's resolved settings (its configure())
    influx_credential: Credential = NO_CREDENTIAL   # [store] influx's, from the environment or its file

    @property
    def backend(self) -> Backend:
        return BACKENDS[self.data.lab.backend]

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def store_dir(self) -> Path:
        return (self.base_dir / self.data.store.dir).resolve()

    @property
    def profile_dir(self) -> Path:
        return self.profile_dir_override or (self.base_dir / self.data.run.profile_dir).resolve()


def load_config(path: Path, profile_names: list[str] | None = None, time_scale: float | None = None,
                profile_dir: Path | None = None) -> Config:
    """Load and validate config.toml and every profile it (or the command line) names."""
    path = Path(path)
    if time_scale is not None and not 0 < time_scale <= 10:
        raise ConfigError.option("--time-scale", time_scale, "a factor in (0, 10]")
    source = load(path)
    data = validate(source, ConfigFile)
    lab = _lab(path, source, data.lab)
    credential = _influx_credential(path, source, data.store.influx)
    names = profile_names or data.run.profiles
    profile_dir = Path(profile_dir) if profile_dir else (path.parent / data.run.profile_dir).resolve()
    profiles = []
    for name in names:
        try:
            profile_path = find_profile(name, profile_dir)
        except ConfigError as exc:
            if profile_names:
                raise ConfigError.option("--profile", name, exc.allowed) from None
            loc = ("run", "profiles")
            raise ConfigError(path, source.line_of(loc), loc, name, exc.allowed) from None
        profiles.append(load_profile(profile_path, time_scale))
    return Config(path=path.resolve(), data=data, raw=source.data, profiles=profiles, time_scale=time_scale,
                  profile_dir_override=Path(profile_dir) if profile_dir else None, lab=lab,
                  influx_credential=credential)


def _influx_credential(path: Path, source, settings: InfluxSettings | None) -> Credential:
    if settings is None:
        return NO_CREDENTIAL
    try:
        return resolve_credential(settings, path.parent)
    except SettingError as exc:
        raise ConfigError(path, source.line_of(exc.keypath), exc.keypath, exc.value, exc.allowed) from None


def _lab(path: Path, source, section: LabSection):
    """The backend's own keys of [lab], validated by its settings model and resolved by it (an
    inventory read, an image found), so a bad lab stops the run before anything starts."""
    loc = ("lab", "backend")
    backend = BACKENDS.get(section.backend)
    if backend is None:
        raise ConfigError(path, source.line_of(loc), loc, section.backend,
                          f"not available in this version; implemented: {', '.join(BACKENDS)}")
    own = dict(section.model_extra or {})
    settings = validate(source, backend.settings, data=own, origins={(key,): ("lab", key) for key in own})
    try:
        return backend.configure(settings, path.parent)
    except SettingError as exc:
        loc = ("lab", *exc.keypath)
        raise ConfigError(path, source.line_of(loc), loc, exc.value, exc.allowed) from None
    except OSError as exc:
        # a path these settings name that the file system refuses (a name longer than NAME_MAX, a
        # directory without permission): the backends look for files, they do not expect this
        loc = ("lab",)
        raise ConfigError(path, source.line_of(loc), loc, exc.filename,
                          f"paths the file system can use ({exc.strerror})") from None
