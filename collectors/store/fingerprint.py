"""The manifest's `fingerprint` section (docs/results-format.md) and what changed between two runs'.

The section: `{"controller": <host fingerprint>, "hosts": {"S1": ..., "R1": ...}, "taken": <ISO
time>, "lab": "lab-1"}`, each host fingerprint the object drivers/agents/fingerprint.py prints on
that host (its format and version are the agent's, named there once), or `{"error": "..."}` when it
could not be taken. Runs written before the section existed get a partial one from their `host`
and `tools` keys (fingerprint_of), so a diff against an old run still names a kernel change.

The diff is pure: each host's fingerprint flattened to dotted keys (`kernel.release`,
`sysctl.net.ipv4.tcp_rmem`, `nics.eth0.offloads.tcp-segmentation-offload`), compared key by key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from longhaul.collectors.store.manifest import RunManifest
from longhaul.collectors.store.provenance import CONTROLLER_TOOLS
from longhaul.drivers.agents.fingerprint import FINGERPRINT, SECTIONS

CONTROLLER = "controller"
HOSTS = "hosts"
PARTIAL = "partial"               # a section or host fingerprint rebuilt from an old run's manifest
HOST_KEY = "(host)"               # the change of a host that one run has and the other has not
ERROR_KEY = "(error)"             # the change of a host whose fingerprint one run could not take
PRESENT = "present"
_META = frozenset({"format", "version", PARTIAL})
CATEGORY_ORDER = ("kernel", *[s for s in SECTIONS if s != "kernel"])
VALUE_CHARS = 60                  # longer values are cut in summary lines (the Change keeps them whole)


@dataclass(frozen=True)
class Change:
    """One fingerprint item that differs; before/after None: absent in that run."""

    host: str
    key: str
    before: str | None
    after: str | None

    @property
    def category(self) -> str:
        return self.key.split(".", 1)[0]


def section(controller: dict, hosts: dict[str, dict], taken: str, lab: str | None) -> dict:
    """The manifest's fingerprint section, as the runner stores it."""
    return {CONTROLLER: controller, HOSTS: dict(hosts), "taken": taken, "lab": lab}


def fingerprint_of(manifest: RunManifest) -> dict | None:
    """The manifest's fingerprint section; for a run from before it existed, a partial one from the
    manifest's `host` (the controller's kernel) and `tools` (the controller's, renamed as the agent
    names them); None when the manifest has neither."""
    if isinstance(manifest.fingerprint, dict):
        return manifest.fingerprint
    kernel, tools = manifest.host.kernel, manifest.tools or {}
    if not kernel and not tools:
        return None
    controller = {**FINGERPRINT.stamp(), PARTIAL: True}
    if kernel:
        controller["kernel"] = {"release": kernel}
    if tools:
        controller["tools"] = {CONTROLLER_TOOLS.get(name, name): value for name, value in tools.items()}
    return {CONTROLLER: controller, HOSTS: {}, "taken": manifest.started, "lab": None, PARTIAL: True}


# -- flattening and the diff ---------------------------------------------------------------------

def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        if all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
            return " ".join(str(v) for v in value)
        return json.dumps(value, sort_keys=True)
    return str(value)


def flatten(host_fp: dict) -> dict[str, str]:
    """A host fingerprint as dotted key -> text. Lists are space-joined (`cca.available`: "bbr
    cubic reno"); None (a value the host does not know) is left out, as is the format header."""
    out: dict[str, str] = {}

    def walk(prefix: str, value) -> None:
        if value is None:
            return
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
            return
        out[prefix] = _text(value)

    walk("", {k: v for k, v in (host_fp or {}).items() if k not in _META})
    return out


def _host_error(host_fp: dict | None) -> str | None:
    """The error of a fingerprint that was not taken at all (not of one of its parts)."""
    if isinstance(host_fp, dict) and "error" in host_fp and "format" not in host_fp:
        return str(host_fp["error"])
    return None


def _hosts(fp_section: dict | None) -> dict[str, dict]:
    if not isinstance(fp_section, dict):
        return {}
    hosts = {name: fp for name, fp in (fp_section.get(HOSTS) or {}).items() if isinstance(fp, dict)}
    if isinstance(fp_section.get(CONTROLLER), dict):
        hosts = {CONTROLLER: fp_section[CONTROLLER], **hosts}
    return hosts


def _is_partial(fp: dict | None) -> bool:
    return isinstance(fp, dict) and bool(fp.get(PARTIAL))


def host_order(name: str) -> tuple:
    """The controller, then senders, routers, receivers (S1, S2, R1, R2, D1), then any other name."""
    match = re.fullmatch(r"([SRD])(\d+)", name)
    if name == CONTROLLER:
        return (0, 0, name)
    if match:
        return (1 + "SRD".index(match.group(1)), int(match.group(2)), name)
    return (4, 0, name)


def diff_hosts(host: str, a: dict, b: dict) -> list[Change]:
    """What differs between two fingerprints of one host. A partial side (an old run) is compared
    on the keys it has only: what it does not record is unknown, not absent."""
    errors = (_host_error(a), _host_error(b))
    if errors != (None, None):
        return [Change(host, ERROR_KEY, *errors)] if errors[0] != errors[1] else []
    flat_a, flat_b = flatten(a), flatten(b)
    if _is_partial(a) or _is_partial(b):
        keys = set(flat_a) & set(flat_b)
    else:
        keys = set(flat_a) | set(flat_b)
    return [Change(host, key, flat_a.get(key), flat_b.get(key)) for key in sorted(keys)
            if flat_a.get(key) != flat_b.get(key)]


def diff_fingerprints(a: dict | None, b: dict | None) -> list[Change]:
    """The changes from fingerprint section a (the earlier run's) to b, sorted by host (host_order)
    then key. A host only one run has is one change, key "(host)"; unless one side is partial."""
    hosts_a, hosts_b = _hosts(a), _hosts(b)
    partial = _is_partial(a) or _is_partial(b)
    changes = []
    for host in sorted(set(hosts_a) | set(hosts_b), key=host_order):
        if host in hosts_a and host in hosts_b:
            changes += diff_hosts(host, hosts_a[host], hosts_b[host])
        elif not partial:
            changes.append(Change(host, HOST_KEY, PRESENT if host in hosts_a else None,
                                  PRESENT if host in hosts_b else None))
    return changes


# -- the summary ---------------------------------------------------------------------------------

def _shown(value: str | None) -> str:
    if value is None:
        return "(absent)"
    if value == "":
        return "(none)"
    return value if len(value) <= VALUE_CHARS else value[:VALUE_CHARS - 1] + "…"


def _on(hosts: list[str]) -> str:
    return ", ".join(hosts) + (f" ({len(hosts)} hosts)" if len(hosts) > 1 else "")


def _line(key: str, before: str | None, after: str | None, hosts: list[str]) -> str:
    if key == HOST_KEY:
        return f"hosts: {_on(hosts)} only in the {'first' if after is None else 'second'} run"
    if key == ERROR_KEY:
        which, error = ("first", before) if before is not None else ("second", after)
        return f"no fingerprint of {_on(hosts)} in the {which} run: {_shown(error)}"
    label = "kernel" if key == "kernel.release" else key.replace(".", " ", 1)
    return f"{label}: {_shown(before)} -> {_shown(after)} on {_on(hosts)}"


def _category_rank(category: str) -> tuple:
    """The sections in the agent's order (the kernel first), any other, then host presence and errors."""
    if category in CATEGORY_ORDER:
        return (0, CATEGORY_ORDER.index(category), category)
    if category in (HOST_KEY, ERROR_KEY):
        return (2, (HOST_KEY, ERROR_KEY).index(category), category)
    return (1, 0, category)


def summarise(changes: Iterable[Change], per_category: int = 10) -> list[str]:
    """Short lines for people: a key that changed the same way on several hosts is one line
    ("kernel: 6.1.0-50-amd64 -> 6.1.0-53-amd64 on S1, R1, R2, D1 (4 hosts)"); categories in
    CATEGORY_ORDER (the kernel first), then host presence and errors; at most per_category lines
    a category, then how many more."""
    groups: dict[tuple[str, str | None, str | None], list[str]] = {}
    for change in changes:
        groups.setdefault((change.key, change.before, change.after), []).append(change.host)
    by_category: dict[str, list[str]] = {}
    ordered = sorted(groups.items(), key=lambda item: (item[0][0] != "kernel.release", item[0][0],
                                                       [host_order(h) for h in item[1]]))
    for (key, before, after), hosts in ordered:
        hosts = sorted(set(hosts), key=host_order)
        by_category.setdefault(key.split(".", 1)[0], []).append(_line(key, before, after, hosts))
    lines = []
    for category in sorted(by_category, key=_category_rank):
        found = by_category[category]
        lines += found[:per_category]
        if len(found) > per_category:
            lines.append(f"{category}: and {len(found) - per_category} more changes")
    return lines
