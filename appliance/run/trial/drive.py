"""The trial's event loop: receivers and clients started on schedule (a chooser, where a flow has
one, picks each burst's congestion control from the probe's rounds just before it starts), exits
noted, hosts watched, progress ticked, until every burst has ended or the deadline passed."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from longhaul.appliance.run.trial import endpoints
from longhaul.appliance.run.trial.plan import Chooser, FlowRun, Launch, events, planned_end
from longhaul.appliance.run.trial.state import Trial
from longhaul.hardware.host_watch import HostWatch

GRACE_S = 30.0


def drive(trial: Trial, t0: float, on_tick, watch: HostWatch) -> None:
    """trial: the Trial (its lab, runs, probe and sampler); t0: its clock's zero (monotonic)."""
    lab, runs, probe = trial.lab, trial.runs, trial.probe
    probe_s = trial.spec.cell.probe.duration_s or 0.0
    pending = events(runs)
    deadline = t0 + max([planned_end(r.flow) + r.tool.start_allowance_s for r in runs] + [probe_s]) + GRACE_S
    late = 0.0
    next_tick = time.monotonic()
    while True:
        watch.check()
        now = time.monotonic()
        while pending and pending[0][0] <= now - t0:
            _, _, kind, run, launch = pending.pop(0)
            if kind == "server":
                launch.server_spec = run.tool.server(launch.spec)
                if launch.server_spec is not None:        # a tool may need no receiver of its own
                    launch.server = endpoints.launch_server(lab, run, launch.server_spec, launch.server_raw)
                continue
            if launch.server is not None and launch.server_spec is not None:
                endpoints.wait_ready(lab, run, launch.server, launch.server_spec)
            if run.chooser is not None:
                _choose(run, run.chooser, launch, probe, round(time.monotonic() - t0, 3))
            launch.proc = lab.executor(run.sender).start(
                endpoints.with_cca(run, run.tool.client(launch.spec), launch.spec.cca),
                label=f"{run.tool.name}-{run.flow.name}-b{launch.burst.index}",
                stdout=launch.raw, stderr=launch.raw.with_suffix(".err"))
            launch.launched_s = round(time.monotonic() - t0, 3)
            # a burst that started late (its server slow to get ready: an NFS export on a TCG VM
            # took 26 s) moves its end, and the deadline, by as much
            late = max(late, launch.launched_s - launch.launch_at)
        running = [(l, proc) for r in runs for l in r.launches if (proc := l.proc) and l.exited_s is None]
        for launch, proc in running:
            if proc.poll() is not None:
                launch.exited_s = round(time.monotonic() - t0, 3)
        if not pending and all(l.exited_s is not None for r in runs for l in r.launches) and now - t0 >= probe_s:
            return
        if now > deadline + late:
            raise TimeoutError(f"flows still running {GRACE_S:.0f}s after their planned end"
                               + (f" (started {late:.0f}s late)" if late >= 1 else ""))
        if on_tick and now >= next_tick:
            on_tick(now - t0, trial.sampler.current(), probe.latest())
            next_tick = now + 0.5
        until_next = t0 + pending[0][0] - time.monotonic() if pending else 0.05
        time.sleep(max(0.0, min(until_next, 0.05)))


def _choose(run: FlowRun, chooser: Chooser, launch: Launch, probe, t_s: float) -> None:
    cca, note = chooser(launch.burst, probe.so_far())
    launch.spec = replace(launch.spec, cca=cca)
    run.decisions.append([run.flow.name, launch.burst.index, t_s, cca, json.dumps(note, sort_keys=True)])
