"""Live progress on stderr: cell k of N, trial, per-flow throughput and RTT now, ETA.

On a terminal it is a rich live panel; elsewhere (CI, pipes) a plain line every few seconds.
Standard output is kept for the final table and the run directory.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from longhaul.collectors.store.records import TrialSummary, Verification
from longhaul.drivers.patterns import span


def planned_trial_s(spec) -> float:
    """The flows' planned span plus iperf3's set-up and result exchange, about 8 round trips."""
    ends = [span(f)[1] or span(f)[0] for f in spec.cell.flows] + [spec.cell.probe.duration_s or 0.0]
    return max(ends) + 8 * spec.cell.topology.rtt_ms / 1000


class Progress:
    def __init__(self, console: Console | None = None, live: bool | None = None):
        self.console = console or Console(stderr=True)
        self.live_enabled = sys.stderr.isatty() if live is None else live
        self._live: Live | None = None
        self._jobs = []
        self._job_index = 0
        self._spec = None
        self._trial = (0, 0)
        self._remaining_s = 0.0
        self._overhead_s = 8.0
        self._trial_started = 0.0
        self._last_plain = 0.0

    # run / cell / trial boundaries
    def start_run(self, run_dir, jobs) -> None:
        """jobs: what this run still has to do, in order (objects with .spec, .trial, .repeats)."""
        self._jobs = jobs
        self._remaining_s = sum(planned_trial_s(j.spec) for j in jobs)
        cells = len({j.spec.id for j in jobs})
        self.console.print(f"[bold]longhaul[/bold]: {cells} cell(s), {len(jobs)} trial(s) to run, run directory {run_dir}")
        if self.live_enabled:
            self._live = Live(self._render(0.0, {}, None), console=self.console, refresh_per_second=4, transient=True)
            self._live.start()

    def message(self, text: str) -> None:
        self.console.print(text)

    def start_cell(self, index: int, spec) -> None:
        """index: the job's place in the run (1-based)."""
        if self._spec is not None and self._spec.id == spec.id and index == self._job_index + 1:
            self._job_index = index
            return
        self._job_index, self._spec = index, spec
        params = ", ".join(f"{k}={v}" for k, v in spec.params.items())
        self.console.print(f"[{index}/{len(self._jobs)}] {spec.id}: {params}")

    def verified(self, verification: Verification) -> None:
        rtt, rate = verification.rtt_ms, verification.rate_mbps
        flag = "ok" if verification.ok else "REFUSED: " + "; ".join(verification.problems)
        if verification.host_cpu_steal_pct:
            flag += f" (host CPU steal {verification.host_cpu_steal_pct:g} %)"
        shared = f" (the lab as verified for {verification.shared_from}, its RTT re-checked)" \
            if verification.shared_from else ""
        self.console.print(f"  lab: RTT {_fmt(rtt.measured)} ms (configured {rtt.configured:g}), "
                           f"rate {_fmt(rate.measured)} Mb/s (configured {rate.configured:g}): {flag}{shared}")

    def start_trial(self, trial: int, repeats: int) -> None:
        self._trial = (trial, repeats)
        self._trial_started = time.monotonic()

    def end_trial(self, trial: TrialSummary) -> None:
        elapsed = time.monotonic() - self._trial_started
        planned = planned_trial_s(self._spec)
        self._overhead_s = 0.5 * self._overhead_s + 0.5 * max(0.0, elapsed - planned)
        self._remaining_s = max(0.0, self._remaining_s - planned)
        flows = ", ".join(f"{f.name} {_fmt(f.mean_mbps)} Mb/s" for f in trial.flows)
        self.console.print(f"  trial {trial.trial}: {trial.status}: {flows}"
                           + (f", Jain {trial.jain:.3f}" if trial.jain is not None else "")
                           + (f" ({trial.error})" if trial.error else ""))

    def tick(self, elapsed: float, flows: dict, rtt_ms: float | None) -> None:
        if self._live:
            self._live.update(self._render(elapsed, flows, rtt_ms))
        elif time.monotonic() - self._last_plain > 5:
            self._last_plain = time.monotonic()
            now = ", ".join(f"{n} {_fmt(v['mbps'])} Mb/s" for n, v in flows.items())
            self.console.print(f"  t={elapsed:5.1f}s {now} RTT {_fmt(rtt_ms)} ms ETA {_eta(self._eta(elapsed))}")

    def close(self) -> None:
        if self._live:
            self._live.stop()
            self._live = None

    def _eta(self, elapsed: float) -> float:
        trials_left = max(1, len(self._jobs) - self._job_index + 1)
        return max(0.0, self._remaining_s - elapsed) + self._overhead_s * trials_left

    def _render(self, elapsed: float, flows: dict, rtt_ms: float | None) -> Table:
        trial, repeats = self._trial
        spec_id = self._spec.id if self._spec else "-"
        table = Table(title=f"trial {self._job_index}/{len(self._jobs)}: {spec_id} #{trial}/{repeats}, "
                            f"t={elapsed:.0f}s, ETA {_eta(self._eta(elapsed))}", expand=False)
        table.add_column("flow")
        table.add_column("Mb/s (delivery rate)", justify="right")
        table.add_column("sRTT ms", justify="right")
        for name, value in flows.items():
            table.add_row(name, _fmt(value.get("mbps")), _fmt(value.get("srtt_ms")))
        table.add_row("probe RTT", "", _fmt(rtt_ms))
        return table


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _eta(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"
