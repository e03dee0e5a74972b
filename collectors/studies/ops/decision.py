"""The OPS decision model (seed 000 §5.5, Figure 12): recognised background class -> foreground CCA.

Declared in TOML (profiles/ops/decision.toml by default) so a facility can change it:

    [decision]
    description = "..."
    [decision.map]
    cubic = "cubic"
    bbr = "bbr"
    ...

Validation is strict because a wrong mapping silently picks the unfair protocol: every class the
classifier knows must be mapped, no unknown class may appear, and each value must be a Linux
congestion control.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from longhaul.collectors.studies.ops import dataset as ops_dataset
from longhaul.core.errors import ConfigError
from longhaul.core.paths import PROFILES
from longhaul.core.tomlsource import load as load_toml

_PROFILES = PROFILES
# The shipped Figure 12 mapping; profiles/ops/ keeps it out of the run profiles' *.toml glob.
DEFAULT_CANDIDATES = (_PROFILES / "ops" / "decision.toml",)
# Congestion controls in mainline Linux (net/ipv4/tcp_*.c); whether one is loaded is checked by
# the lab's preflight when a run uses it.
KNOWN_CCAS = ("bbr", "bic", "cdg", "cubic", "dctcp", "highspeed", "htcp", "hybla", "illinois", "lp",
              "nv", "reno", "scalable", "vegas", "veno", "westwood", "yeah")


@dataclass(frozen=True)
class Decision:
    mapping: dict[str, str]
    description: str = ""
    source: str | None = None  # the TOML file it came from, if any

    def decide(self, cls: str) -> str:
        """The foreground CCA for a recognised background class."""
        try:
            return self.mapping[cls]
        except KeyError:
            raise ValueError(f"class {cls!r} is not in the decision model ({sorted(self.mapping)})") from None


    def to_dict(self) -> dict:
        return {"mapping": dict(self.mapping), "description": self.description, "source": self.source}


def rule_mapping(class_flows: dict | None = None) -> dict[str, str]:
    """Figure 12 applied to class definitions: any BBR flow in the background -> bbr, else cubic."""
    flows = ops_dataset.class_flows(class_flows)
    return {cls: "bbr" if any(cca == "bbr" for _, cca in f) else "cubic" for cls, f in flows.items()}


def default() -> Decision:
    """Figure 12 for the built-in classes, without reading a file."""
    return Decision(rule_mapping(), "Seed 000 Figure 12: BBR present in the background -> BBR, otherwise CUBIC")


def default_path() -> Path:
    return next((p for p in DEFAULT_CANDIDATES if p.is_file()), DEFAULT_CANDIDATES[-1])


def load(path: Path | None = None, classes: list[str] | None = None) -> Decision:
    """Read and validate a decision TOML against `classes` (default: the built-in six)."""
    path = Path(path) if path is not None else default_path()
    source = load_toml(path)
    data = source.data
    unknown_top = set(data) - {"decision"}
    if unknown_top:
        key = sorted(unknown_top)[0]
        raise ConfigError(path, source.line_of((key,)), (key,), None, "only a [decision] table is allowed")
    table = data.get("decision")
    if not isinstance(table, dict):
        # no [decision] at all, or decision written as something else: name what the file has
        raise ConfigError(path, source.line_of(("decision",)), ("decision",), None,
                          "a [decision] table with a [decision.map] table of class = \"cca\"")
    if not isinstance(table.get("map"), dict):
        loc = ("decision", "map")        # the line of map, or of the [decision] that lacks it
        raise ConfigError(path, source.line_of(loc), loc, None, "a [decision.map] table of class = \"cca\"")
    extra = set(table) - {"description", "map"}
    if extra:
        key = sorted(extra)[0]
        raise ConfigError(path, source.line_of(("decision", key)), ("decision", key), None,
                          "allowed keys: description, map")
    description = table.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(path, source.line_of(("decision", "description")), ("decision", "description"),
                          description, "a string")
    mapping = validate(table["map"], classes, path, source.line_of)
    return Decision(mapping, description, str(path))


def validate(mapping: dict, classes: list[str] | None = None, path: Path | None = None,
             line_of=lambda key: None) -> dict[str, str]:
    """The mapping if it covers exactly `classes` with known CCAs; ConfigError naming the entry otherwise."""
    classes = list(classes) if classes is not None else list(ops_dataset.CLASSES)
    for cls, cca in mapping.items():
        key = ("decision", "map", cls)
        if cls not in classes:
            raise ConfigError(path, line_of(key), key, None, f"unknown class; the classes are {classes}")
        if not isinstance(cca, str) or cca not in KNOWN_CCAS:
            raise ConfigError(path, line_of(key), key, cca, f"a congestion control, one of {list(KNOWN_CCAS)}")
    missing = [c for c in classes if c not in mapping]
    if missing:
        raise ConfigError(path, line_of(("decision", "map")), ("decision", "map"), None,
                          f"every class needs a congestion control; missing {missing}")
    return {c: mapping[c] for c in classes}




def from_dict(data: dict, classes: list[str] | None = None) -> Decision:
    """A Decision from its to_dict() form (as stored inside a model), validated again."""
    mapping = validate(dict(data.get("mapping") or {}), classes)
    return Decision(mapping, str(data.get("description", "")), data.get("source"))
