"""The OPS experiments of seed 000 as ordinary profiles, so that they run through the runner, the
trial, the tool registry and the store like any other study, on any backend.

Pure: each function returns the profile's TOML text and a plan (scenario -> what it stands for)
that the OPS study reads back from the stored run.

- `record_profile` (sections 5.2, 6.6): one cell per probing mode and background class. The
  class's background streams (S1, S2) start at 0; the RTT probe (the probe pair) records from the
  start; the dataset keeps the rounds from the end of the warm-up for `duration_s`. Active probing
  is the profile of short bursts on the probe pair (CUBIC 5 s, BBR 5 s, CUBIC 5 s, none 5 s),
  each step a square flow of the cycle's period starting at the warm-up plus its offset, so the
  cycle is aligned with the probe's rounds. The class without background is a cell with no flows.
- `fig29_profile` (section 6.7): per background CCA and scheme, one cell: the background stream,
  and the foreground in the paper's cycle (probe w s, classify, decide, transfer a period), a
  square flow whose off-windows are the probe windows; the foreground's CCA is chosen before each
  burst by the scheme's chooser (the adaptive scheme from the window, a fixed one whatever it
  says, logging what OPS would have chosen). `continuous` fixed schemes transfer without pause.
"""

from __future__ import annotations

import math

from longhaul.appliance.config.schema import Topology
from longhaul.appliance.ops.lab import ActiveStep

RECORD_PROFILE = "ops-record"
FIG29_PROFILE = "ops-fig29"
IPERF = 'tool = "iperf3"\nprotocol = "tcp"'


def _value(v) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f'"{k}" = {_value(x)}' for k, x in v.items()) + " }"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _table(header: str, items: dict) -> str:
    """`[header]` (or `[[header]]` for an array of tables) and its keys; None leaves a key out."""
    return f"{header}\n" + "".join(f"{k} = {_value(v)}\n" for k, v in items.items() if v is not None) + "\n"


def _head(description: str, topo: Topology, probe_pair: int, probe_s: float | None) -> str:
    return (_table("[profile]", {"description": description, "repeats": 1})
            + _table("[topology]", topo.model_dump())
            + _table("[tuning]", {"cca": "cubic", "buffer": "large"})
            + _table("[probe]", {"pair": probe_pair, "mode": "burst", "duration_s": probe_s}))


def active_flows(steps: list[ActiveStep], pair: int, start_s: float, cycle_s: float, duration_s: float,
                 window_s: float | None = None) -> list[dict]:
    """The active probing profile as square flows on the probe pair: each step a burst at its
    offset in the profile, repeated every cycle_s; within a probe window of window_s a step that
    would outlast the window is cut at its end ("none" is a pause)."""
    flows, offset = [], 0.0
    for index, step in enumerate(steps):
        on = step.seconds if window_s is None else min(step.seconds, window_s - offset)
        if step.cca != "none" and on >= 1:
            flow = {"name": f"active{index}", "role": "background", "tool": "iperf3", "pair": pair,
                    "cca": step.cca, "pattern": "square", "on_s": float(math.floor(on)),
                    "off_s": float(cycle_s - math.floor(on)), "start_s": float(start_s + offset),
                    "duration_s": float(duration_s - offset)}
            if step.streams != 1:
                flow["streams"] = step.streams
            if step.buffer is not None:
                flow["buffer"] = step.buffer
            if step.pacing_mbps is not None:
                flow["options"] = {"pacing_mbps": step.pacing_mbps}
            flows.append(flow)
        offset += step.seconds
    return flows


def record_profile(topo: Topology, background_pairs: list[int], probe_pair: int, classes: dict[str, list[str]],
                   modes: list[str], duration_s: float, warmup_s: float,
                   active_steps: list[ActiveStep]) -> tuple[str, dict]:
    """(profile text, plan): plan["scenarios"][name] = {"class", "probing"}."""
    span = warmup_s + duration_s
    cycle = sum(step.seconds for step in active_steps)
    text = _head("OPS recording: labelled RTT series of the background classes (seed 000 5.2)",
                 topo, probe_pair, span + 1)
    background = [{"name": f"bg{pair}", "role": "background", "tool": "iperf3", "pair": pair, "cca": "cubic",
                   "duration_s": float(span + 2)} for pair in background_pairs]
    active = active_flows(active_steps, probe_pair, warmup_s, cycle, duration_s)
    text += "".join(_table("[[flows]]", f) for f in background + active)
    plan = {"kind": "ops-record", "warmup_s": warmup_s, "duration_s": duration_s, "modes": modes,
            "classes": classes, "active_cycle_s": cycle, "scenarios": {}}
    for mode in modes:
        for name, ccas in classes.items():
            scenario = f"{mode}-{name}"
            if len(ccas) > len(background_pairs):
                raise ValueError(f"class {name!r} has {len(ccas)} background streams; the lab has "
                                 f"{len(background_pairs)} background pairs")
            flows = [f"bg{pair}" for pair in background_pairs[:len(ccas)]]
            flows += [f["name"] for f in active] if mode == "active" else []
            overrides = {f"flows.bg{pair}.cca": cca for pair, cca in zip(background_pairs, ccas)}
            text += _table("[[scenarios]]", {"name": scenario, "flows": flows, "set": overrides or None})
            plan["scenarios"][scenario] = {"class": name, "probing": mode}
    return text, plan


def scheme_slug(scheme: str) -> str:
    return scheme.replace(":", "-").lower()


def fig29_profile(topo: Topology, background_pair: int, foreground_pair: int, probe_pair: int,
                  backgrounds: list[str], schemes: list[str], total_s: float, period_s: float, w: int,
                  warmup_s: float, settle_s: float, cycled: bool,
                  active_steps: list[ActiveStep] | None) -> tuple[str, dict]:
    """(profile text, plan): plan["scenarios"][name] = {"background", "scheme", "fixed"}."""
    window = w + 1                          # w rounds, and one more in case a round starts late
    cycle = period_s + settle_s + window
    cycles = math.ceil(total_s / period_s)
    fg_span = (cycles - 1) * cycle + (total_s - (cycles - 1) * period_s)
    end = warmup_s + window + fg_span
    text = _head("OPS Figure 29: fixed CUBIC, fixed BBR and adaptive foregrounds (seed 000 6.7)",
                 topo, probe_pair, None)
    flows = [{"name": "bg", "role": "background", "tool": "iperf3", "pair": background_pair, "cca": "cubic",
              "duration_s": float(end + 5)},
             {"name": "fg", "role": "foreground", "tool": "iperf3", "pair": foreground_pair, "cca": "cubic",
              "pattern": "square", "on_s": float(period_s), "off_s": float(settle_s + window),
              "start_s": float(warmup_s + window), "duration_s": float(fg_span)}]
    active = active_flows(active_steps, probe_pair, warmup_s, cycle, end - warmup_s, window) if active_steps else []
    text += "".join(_table("[[flows]]", f) for f in flows + active)
    plan = {"kind": "ops-fig29", "w": w, "period_s": period_s, "settle_s": settle_s, "warmup_s": warmup_s,
            "total_s": total_s, "cycle_s": cycle, "fg_start_s": warmup_s + window, "scenarios": {}}
    for background in backgrounds:
        for scheme in schemes:
            fixed = scheme.split(":")[1].lower() if scheme.startswith("Fixed:") else None
            name = f"{background}-{scheme_slug(scheme)}"
            overrides = {"flows.bg.cca": background}
            chosen = ["bg", "fg", *[f["name"] for f in active]]
            if fixed and not cycled:        # one transfer without probe gaps
                overrides.update({"flows.fg.pattern": "constant", "flows.fg.start_s": float(warmup_s),
                                  "flows.fg.duration_s": float(total_s), "flows.fg.cca": fixed})
                chosen = ["bg", "fg"]
            text += _table("[[scenarios]]", {"name": name, "flows": chosen, "set": overrides})
            plan["scenarios"][name] = {"background": background, "scheme": scheme, "fixed": fixed,
                                       "chooses": bool(cycled or not fixed)}
    return text, plan
