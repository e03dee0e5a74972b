"""config.toml: which lab, where results go, which profiles run, what the report looks like."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from longhaul.core.errors import ConfigError
from longhaul.appliance.config.profiles import Profile, find_profile, load_profile
from longhaul.core.model import Strict
from longhaul.core.tomlsource import load
from longhaul.core.validation import validate

IMPLEMENTED_BACKENDS = ("netns", "ssh", "qemu")


class QemuSection(Strict):
    """The qemu backend: the appliance image (`make image`) booted as VMs (hardware/backends/qemu/fleet.py)."""

    image: str = "build/image"            # the image directory, relative to config.toml
    accel: Literal["auto", "tcg", "kvm"] = "auto"
    memory_mb: int = Field(512, ge=256, le=16384)
    boot_timeout_s: float = Field(420, gt=0, le=3600)


class LabSection(Strict):
    """netns: the embedded lab of namespaces on this machine; ssh: real, already-wired hosts
    reached over SSH, described by an inventory (hardware/backends/ssh/lab.py); qemu: the appliance
    image booted as VMs on this machine, then driven over SSH like the ssh backend."""

    backend: str = "netns"
    inventory: str | None = None          # ssh: a name (hardware/<name>.toml) or a path to a .toml
    qemu: QemuSection = QemuSection()


class StoreSection(Strict):
    dir: str = "runs"


class RunSection(Strict):
    profiles: list[str] = Field(["quickstart"], min_length=1)
    profile_dir: str = "profiles"
    # "random" shuffles all trials of the run (seeded, the seed is recorded) so slow drift of the
    # host cannot line up with a sweep axis; labs are rebuilt only when the topology changes
    order: Literal["sequential", "random"] = "sequential"
    seed: int | None = Field(None, ge=0)


class ReportSection(Strict):
    formats: list[Literal["html", "pdf"]] = ["html", "pdf"]


class VerifySection(Strict):
    """How far the realised lab may be from its configuration before a cell is refused."""

    rtt_tolerance_ms: float = Field(2.0, ge=0)
    rtt_tolerance_pct: float = Field(3.0, ge=0)
    rate_tolerance_pct: float = Field(5.0, ge=0)
    rate_probe_s: float = Field(3.0, gt=0, le=60)
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
    inventory_path: Path | None = None    # ssh backend: the validated inventory file
    image_dir: Path | None = None         # qemu backend: the validated image directory

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
        raise ConfigError(None, None, ("--time-scale",), time_scale, "a factor in (0, 10]")
    source = load(path)
    data = validate(source, ConfigFile)
    if data.lab.backend not in IMPLEMENTED_BACKENDS:
        loc = ("lab", "backend")
        raise ConfigError(path, source.line_of(loc), loc, data.lab.backend,
                          f"not available in this version; implemented: {', '.join(IMPLEMENTED_BACKENDS)}")
    inventory = _inventory(path, source, data.lab)
    image_dir = _image(path, source, data.lab)
    names = profile_names or data.run.profiles
    profile_dir = Path(profile_dir) if profile_dir else (path.parent / data.run.profile_dir).resolve()
    profiles = []
    for name in names:
        try:
            profile_path = find_profile(name, profile_dir)
        except ConfigError as exc:
            if profile_names:
                raise ConfigError(None, None, ("--profile",), name, exc.allowed) from None
            loc = ("run", "profiles")
            raise ConfigError(path, source.line_of(loc), loc, name, exc.allowed) from None
        profiles.append(load_profile(profile_path, time_scale))
    return Config(path=path.resolve(), data=data, raw=source.data, profiles=profiles, time_scale=time_scale,
                  profile_dir_override=Path(profile_dir) if profile_dir else None, inventory_path=inventory,
                  image_dir=image_dir)


def _image(path: Path, source, lab: LabSection) -> Path | None:
    """The qemu backend's image directory, checked now: no VM is booted from a missing image."""
    if lab.backend != "qemu":
        return None
    found = (path.parent / lab.qemu.image).resolve()
    missing = [f for f in ("longhaul.raw", "manifest.json") if not (found / f).is_file()]
    if missing:
        loc = ("lab", "qemu", "image") if ("lab", "qemu", "image") in source.lines else ("lab", "backend")
        raise ConfigError(path, source.line_of(loc), loc, lab.qemu.image,
                          f"an image directory with {' and '.join(missing)} ({found}: build it with `make image`)")
    return found


def _inventory(path: Path, source, lab: LabSection) -> Path | None:
    """The ssh backend's inventory: a name (hardware/<name>.toml beside config.toml) or a path
    (relative to config.toml), validated now so a bad inventory stops the run before anything starts."""
    from longhaul.hardware.backends.ssh.inventory import inventory_path, load_inventory

    if lab.backend != "ssh":
        return None
    if lab.inventory is None:
        loc = ("lab", "backend")
        raise ConfigError(path, source.line_of(loc), loc, lab.backend,
                          "'ssh' needs [lab] inventory = \"<name>\" (hardware/<name>.toml) or a path to one")
    loc = ("lab", "inventory")
    if "/" in lab.inventory or lab.inventory.endswith(".toml"):
        found = (path.parent / lab.inventory).resolve()
    else:
        try:
            found = inventory_path(lab.inventory, path.parent).resolve()
        except ConfigError as exc:
            raise ConfigError(path, source.line_of(loc), loc, lab.inventory, exc.allowed) from None
    if not found.is_file():
        raise ConfigError(path, source.line_of(loc), loc, lab.inventory, f"an inventory file ({found} does not exist)")
    load_inventory(found)                 # its own errors name its own file and line
    return found
