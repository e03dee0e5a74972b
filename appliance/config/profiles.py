"""Profiles: one study each. Loading, scenario overrides and sweep expansion into validated cells.

A profile is `profiles/<name>.toml`. Under [topology], [tuning], [probe] and in every [[flows]]
entry, a key given as a list of values is a sweep axis; the cells are the cartesian product of all
axes, per scenario. [[scenarios]] name variants of the base (a subset of flows, overridden keys,
a place in a Table-2-style layout and the paper's values for that cell).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field

from longhaul.appliance.config.schema import Cell
from longhaul.collectors.store.format import CALIBRATION_LABEL
from longhaul.core.errors import ConfigError
from longhaul.core.model import NAME, Strict
from longhaul.core.tomlsource import TomlSource, load
from longhaul.core.validation import translate, validate

SWEEP_SECTIONS = ("topology", "tuning", "probe")


class ProfileMeta(Strict):
    description: str = ""
    repeats: int = Field(3, ge=1, le=1000)
    time_scale: float = Field(1.0, gt=0, le=10)


class Scenario(Strict):
    name: str = Field(pattern=NAME)
    flows: list[str] | None = None
    set: dict[str, object] = {}
    column: str | None = None
    mode: Literal["dedicated", "shared"] | None = None
    reference: dict[str, float] = {}
    reference_source: str | None = None
    # a regression suite's calibration cell: no delay, no shaping below the access rate, so a
    # change of the host itself is told apart from one of the transport (docs/regression.md)
    calibration: bool = False


class ProfileFile(Strict):
    profile: ProfileMeta = ProfileMeta()
    topology: dict = {}
    tuning: dict = {}
    probe: dict = {}
    flows: list[dict] = []
    scenarios: list[Scenario] = []


@dataclass(frozen=True)
class CellSpec:
    id: str
    profile: str
    scenario: str
    params: dict
    cell: Cell
    labels: dict = field(default_factory=dict)
    reference: dict | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    source_text: str
    meta: ProfileMeta
    cells: list[CellSpec]


def load_profile(path: Path, time_scale: float | None = None) -> Profile:
    """Load and expand a profile; `time_scale` (from the command line) overrides the profile's."""
    path = Path(path)
    source = load(path)
    raw = validate(source, ProfileFile)
    if time_scale is not None:
        raw = raw.model_copy(update={"profile": raw.profile.model_copy(update={"time_scale": time_scale})})
    scenarios = raw.scenarios or [Scenario(name="base")]
    cells: list[CellSpec] = []
    for s_index, scenario in enumerate(scenarios):
        for params, cell_dict, origins in _expand(source, raw, scenario, s_index):
            cell = validate(source, Cell, cell_dict, origins)
            for keypath, value, allowed in cell.cross_field_problems():
                where = origins.get(keypath) or translate(keypath, origins)
                raise ConfigError(source.path, source.line_of(where), where, value, allowed)
            cell = _scale_durations(cell, raw.profile.time_scale)
            labels = {k: v for k, v in (("column", scenario.column), ("mode", scenario.mode),
                                        (CALIBRATION_LABEL, scenario.calibration)) if v}
            if scenario.calibration:
                _check_calibration(source, cell, s_index)
            reference = None
            if scenario.reference:
                reference = {"source": scenario.reference_source, "values": dict(scenario.reference)}
            cells.append(CellSpec(
                id=f"{path.stem}-{len(cells) + 1:03d}", profile=path.stem, scenario=scenario.name,
                params={"scenario": scenario.name, **params}, cell=cell, labels=labels,
                reference=reference))
    return Profile(name=path.stem, path=path, source_text=path.read_text(encoding="utf-8"),
                   meta=raw.profile, cells=cells)


def _check_calibration(source, cell: Cell, s_index: int) -> None:
    topo = cell.topology
    if topo.rtt_ms != 0 or topo.bottleneck_rate_mbps < topo.access_rate_mbps:
        where = ("scenarios", s_index, "calibration")
        raise ConfigError(source.path, source.line_of(where), where, True,
                          f"a calibration cell has rtt_ms = 0 and bottleneck_rate_mbps >= access_rate_mbps "
                          f"(this one: {topo.rtt_ms:g} ms, {topo.bottleneck_rate_mbps:g} of "
                          f"{topo.access_rate_mbps:g} Mb/s); set them in the scenario's `set`")


def _scale_durations(cell: Cell, scale: float) -> Cell:
    if scale == 1.0:
        return cell
    flows = [f.model_copy(update={"duration_s": f.duration_s * scale}) if f.duration_s else f
             for f in cell.flows]
    probe = cell.probe
    if probe.duration_s:
        probe = probe.model_copy(update={"duration_s": probe.duration_s * scale})
    return cell.model_copy(update={"flows": flows, "probe": probe})


def _expand(source: TomlSource, raw: ProfileFile, scenario: Scenario, s_index: int):
    """Yield (params, cell dict, origins) for every sweep point of one scenario."""
    base = {key: copy.deepcopy(getattr(raw, key)) for key in SWEEP_SECTIONS}
    flows = copy.deepcopy(raw.flows)
    names = [f.get("name") for f in flows]
    origins: dict[tuple, tuple] = {}
    for key, value in scenario.set.items():
        src = ("scenarios", s_index, "set", key)
        parts = key.split(".")
        if parts[0] in SWEEP_SECTIONS and len(parts) == 2:
            base[parts[0]][parts[1]] = value
            origins[(parts[0], parts[1])] = src
        elif parts[0] == "flows" and len(parts) == 3 and parts[1] in names:
            flows[names.index(parts[1])][parts[2]] = value
            origins[("flows", names.index(parts[1]), parts[2])] = src
        else:
            allowed = "a key to override: topology.KEY, tuning.KEY, probe.KEY or flows.FLOWNAME.KEY"
            raise ConfigError(source.path, source.line_of(src), src, value, allowed)
    keep = list(range(len(flows)))
    if scenario.flows is not None:
        unknown = [n for n in scenario.flows if n not in names]
        if unknown:
            src = ("scenarios", s_index, "flows")
            raise ConfigError(source.path, source.line_of(src), src, unknown, f"flows must name flows of this profile: {names}")
        keep = [i for i, n in enumerate(names) if n in scenario.flows]

    axes: list[tuple[str, tuple, list]] = []
    for section in SWEEP_SECTIONS:
        for key, value in base[section].items():
            if isinstance(value, list):
                axes.append((f"{section}.{key}", (section, key), value))
    for index in keep:
        for key, value in flows[index].items():
            if isinstance(value, list):
                axes.append((f"flows.{names[index]}.{key}", ("flows", index, key), value))
    for path_name, where, values in axes:
        if not values:
            src = origins.get(where, where)
            raise ConfigError(source.path, source.line_of(src), src, values, "a sweep list needs at least one value")

    cell_origins = {k: v for k, v in origins.items() if k[0] != "flows"}
    for new_index, old_index in enumerate(keep):
        cell_origins[("flows", new_index)] = origins.get(("flows", old_index), ("flows", old_index))
        for key in flows[old_index]:
            if ("flows", old_index, key) in origins:
                cell_origins[("flows", new_index, key)] = origins[("flows", old_index, key)]
    for combo in itertools.product(*(values for _, _, values in axes)):
        point = copy.deepcopy(base)
        point_flows = copy.deepcopy(flows)
        params = {}
        for (path_name, where, _), value in zip(axes, combo):
            params[path_name] = value
            if where[0] == "flows":
                point_flows[where[1]][where[2]] = value
            else:
                point[where[0]][where[1]] = value
        point["flows"] = [point_flows[i] for i in keep]
        yield params, point, cell_origins


def find_profile(name: str, profile_dir: Path) -> Path:
    path = Path(profile_dir) / f"{name}.toml"
    # is_file() and glob() raise for a name the file system refuses (longer than NAME_MAX): that
    # is no such profile, and a profile_dir that cannot be listed has none
    try:
        found = path.is_file()
    except OSError:
        found = False
    if not found:
        try:
            available = sorted(p.stem for p in Path(profile_dir).glob("*.toml"))
        except OSError:
            available = []
        raise ConfigError.option("profile", name, f"no such profile in {profile_dir}; available: {', '.join(available) or 'none'}")
    return path
