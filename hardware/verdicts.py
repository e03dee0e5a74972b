"""What a readiness check's output means, in the words every host OS's checks share: the statuses
(ok, warn, fail), the kernel-feature probe and how its evidence reads, a NIC's speed against the
inventory's rate. hardware/backends/ssh/readiness.py builds the checks; each router OS module
(hardware/routers/) builds and reads its own with these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

OK, WARN, FAIL = "ok", "warn", "fail"
_RANK = {OK: 0, WARN: 1, FAIL: 2}

# One line per name: "<name> loaded | builtin | module <path> | config <line> | config none |
# unknown <modinfo's complaint>". $1: module prefix (sch, tcp), $2: config symbol prefix.
KERNEL_SH = r"""kind=$1; sym=$2; shift 2
rel=$(uname -r)
if [ -r /proc/config.gz ]; then cfg=$(zcat /proc/config.gz 2>/dev/null)
elif [ -r "/boot/config-$rel" ]; then cfg=$(cat "/boot/config-$rel"); else cfg=; fi
for n; do
  m="${kind}_$n"
  if grep -qs "^$m " /proc/modules; then echo "$n loaded"; continue; fi
  if grep -qs "/$m\.ko" "/lib/modules/$rel/modules.builtin"; then echo "$n builtin"; continue; fi
  if p=$(modinfo -n "$m" 2>/dev/null); then echo "$n module $p"; continue; fi
  if [ -n "$cfg" ]; then
    u=$(echo "$n" | tr a-z A-Z)
    line=$(printf '%s\n' "$cfg" | grep -E "^(# )?CONFIG_${sym}_${u}( is not set|=)" | head -n 1)
    echo "$n config ${line:-none}"; continue
  fi
  echo "$n unknown $(modinfo -n "$m" 2>&1 | head -n 1)"
done"""

def worst(statuses) -> str:
    return max(statuses, key=_RANK.__getitem__, default=OK)


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def kernel_lines(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, _, rest = line.strip().partition(" ")
        if name:
            out[name] = rest.strip()
    return out


def kernel_feature(evidence: str) -> tuple[str, str]:
    """One probe line's evidence -> (available | loadable | missing | unknown, words)."""
    kind, _, rest = evidence.partition(" ")
    if kind == "loaded":
        return "available", "loaded"
    if kind == "builtin":
        return "available", "built in"
    if kind == "module":
        return ("available", "built in") if rest == "(builtin)" else ("loadable", f"module {rest}")
    if kind == "config":
        if rest.endswith("=y"):
            return "available", "built in (kernel config)"
        if rest.endswith("=m"):
            return "missing", "configured as a module, but no module file is installed"
        return "missing", "not in this kernel (" + ("not configured" if rest == "none" else rest) + ")"
    return "unknown", "cannot tell: no module tools and no kernel config" + (f" ({rest})" if rest else "")


def rate_verdict(speed: float, rate: float, state: str | None) -> tuple[str, str]:
    detail = f"{speed:g} Mb/s (inventory {rate:g})"
    if speed < rate:
        return FAIL, f"{speed:g} Mb/s, slower than the inventory's rate_mbps = {rate:g}"
    if state is not None and state not in ("up", "unknown"):
        return WARN, f"{detail}, link {state}"
    if speed > rate:
        return WARN, f"{detail}: the NIC is faster than the inventory says; experiments assume {rate:g}"
    return OK, detail


@dataclass(frozen=True)
class OsCheck:
    """A check a host's OS knows how to make: what to run there and how its output reads."""
    name: str                                            # the readiness table's "check" column
    argv: tuple[str, ...]
    read: Callable[..., tuple[str, str]] = field(compare=False)   # (Completed) -> (status, detail)
