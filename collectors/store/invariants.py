"""What no stored run of a right lab can hold, checked on the store alone: a second in which the
receivers got more than the bottleneck can pass (the flows' payload through Ethernet framing, with
the one-second bins' slack: collectors/metrics.py), and an RTT below the configured propagation delay
(a probe round or a data socket's smoothed RTT: hardware/path_rtt.py's floor). Either is a fault
of the lab or of the measurement, never a result. The trial counts both as it stores them
(trial.json's `collector`); this reads the trial tables again, so it holds for runs stored before
those counts and for any copy of a run (`longhaul invariants RUN_DIR`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from longhaul.collectors.metrics import PAYLOAD_OVERHEAD, payload_ceiling_mbps, seconds_above
from longhaul.collectors.store.format import RTT_CSV, TCPINFO_CSV, THROUGHPUT_CSV
from longhaul.collectors.store.reader import StoredRun
from longhaul.collectors.store.series import read_rows
from longhaul.hardware.path_rtt import below_floor, floor_limit


@dataclass
class TrialInvariants:
    cell: str
    trial: int
    ceiling_mbps: float
    rtt_floor_ms: float
    seconds: int = 0                                           # whole receiver-seconds read
    above_ceiling: list[tuple[int, float]] = field(default_factory=list)   # (second, Mb/s)
    probe_rounds_below: list[float] = field(default_factory=list)         # their RTTs, ms
    srtt_samples_below: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)          # tables missing or unreadable

    @property
    def ok(self) -> bool:
        return not (self.above_ceiling or self.probe_rounds_below or self.srtt_samples_below)


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def check_trial(store: StoredRun, cell_id: str, trial: int, rate_mbps: float, mtu: int,
                rtt_ms: float, protocols=("tcp",)) -> TrialInvariants:
    out = TrialInvariants(cell_id, trial, payload_ceiling_mbps(rate_mbps, mtu, protocols), floor_limit(rtt_ms))
    where = store.trial_dir(cell_id, trial)
    rows = read_rows(where / THROUGHPUT_CSV, out.problems) or []
    parsed = [(t, r["flow"], r["stream"], v) for r in rows
              if (t := _number(r.get("t_s"))) is not None and (v := _number(r.get("mbps"))) is not None]
    out.seconds = len({round(t) for t, _, stream, _ in parsed if stream == "all" and abs(t - round(t)) < 0.02})
    out.above_ceiling = seconds_above(parsed, out.ceiling_mbps)
    for name, column, found in ((RTT_CSV, "rtt_ms", out.probe_rounds_below),
                                (TCPINFO_CSV, "srtt_ms", out.srtt_samples_below)):
        for row in read_rows(where / name, out.problems) or []:
            value = _number(row.get(column))
            if value and below_floor(value, rtt_ms):       # 0: a socket with no RTT sample yet
                found.append(value)
    return out


def check_run(store: StoredRun) -> list[TrialInvariants]:
    """Every stored trial of every cell with a topology, in store order."""
    found = []
    for entry in store.entries:
        topo = entry.topology
        if topo is None or not topo.bottleneck_rate_mbps:
            continue
        for trial in entry.trials:
            if trial.trial is not None and store.trial_dir(entry.id, trial.trial).is_dir():
                protocols = {f.protocol for f in entry.flows if f.protocol in PAYLOAD_OVERHEAD} or {"tcp"}
                found.append(check_trial(store, entry.id, trial.trial, topo.bottleneck_rate_mbps, topo.mtu or 1500,
                                         topo.rtt_ms or 0.0, protocols))
    return found


def describe(check: TrialInvariants) -> list[str]:
    """One line per broken invariant of a trial."""
    lines = []
    if check.above_ceiling:
        t, worst = max(check.above_ceiling, key=lambda a: a[1])
        lines.append(f"{check.cell} trial {check.trial}: {len(check.above_ceiling)} of {check.seconds} seconds above "
                     f"the payload ceiling {check.ceiling_mbps:.1f} Mb/s (worst {worst:.1f} at {t} s)")
    for what, values in (("probe rounds", check.probe_rounds_below), ("tcp_info sRTT samples", check.srtt_samples_below)):
        if values:
            lines.append(f"{check.cell} trial {check.trial}: {len(values)} {what} below the RTT floor "
                         f"{check.rtt_floor_ms:.2f} ms (least {min(values):.2f} ms)")
    return lines
