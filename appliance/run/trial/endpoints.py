"""What a trial starts around its flows and gives back: each burst's prepared source (and the
steps that undo it), the receivers (shared ones before the clock, per-burst ones on schedule) and
the receivers' arrival meter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from longhaul.appliance.run.trial.plan import FlowRun
from longhaul.collectors.live.arrival_meter import ArrivalMeter
from longhaul.drivers import ccashim
from longhaul.drivers.tool import ServerSpec
from longhaul.hardware.executors.process import Process, wait_until

READY_TIMEOUT_S = 15.0
PREPARE_TIMEOUT_S = 1800.0    # writing a 20 GB source file on a slow disk


def arrival_meter(lab, runs: list[FlowRun], raw: Path) -> ArrivalMeter:
    """A kernel counter on each receiver for the UDP flows whose tool does not count arrivals itself."""
    ports: dict[str, list[int]] = {}
    for run in runs:
        if run.flow.protocol == "udp" and not run.tool.counts_arrivals:
            ports.setdefault(run.receiver, []).extend(run.ports)
    return ArrivalMeter({host: lab.executor(host) for host in ports}, ports, raw)


def prepare(lab, runs: list[FlowRun]) -> list[tuple]:
    """Run each burst's untimed preparation on its sender (a disk transfer's source file); return
    the steps that undo it."""
    steps = []
    try:
        for run in runs:
            executor = lab.executor(run.sender)
            for launch in run.launches:
                before, after = run.tool.prepare(launch.spec)
                steps += [(executor, argv) for argv in after]
                for argv in before:
                    executor.run(argv, timeout=PREPARE_TIMEOUT_S)
    except BaseException:
        undo(steps)
        raise
    return steps


def undo(steps: list[tuple]) -> list[str]:
    """Every step runs, whatever the others did; what failed is returned."""
    failed = []
    for executor, argv in steps:
        done = executor.run(argv, check=False, timeout=PREPARE_TIMEOUT_S)
        if done.returncode != 0:
            failed.append(f"undoing preparation ({' '.join(argv[-4:])}): {(done.stderr or done.stdout).strip()[-300:]}")
    return failed


def start_shared_servers(lab, runs: list[FlowRun], raw: Path) -> list[Process]:
    """Start the receivers the flows' bursts share, then wait until each listens (they come up
    together, before the trial starts)."""
    started = []
    for run in runs:
        if not run.tool.shared_servers:
            continue
        for port in run.ports:
            server_spec = run.tool.server(replace(run.launches[0].spec, port=port))
            if server_spec is None:                      # a tool may need no receiver of its own
                continue
            out = raw / f"{run.flow.name}-server-{port}.json"
            started.append((run, server_spec, launch_server(lab, run, server_spec, out)))
    try:
        for run, server_spec, proc in started:
            wait_ready(lab, run, proc, server_spec)
    except BaseException:
        for _, _, proc in started:
            proc.stop()
        raise
    return [proc for _, _, proc in started]


def with_cca(run: FlowRun, argv: list[str], cca: str | None = None) -> list[str]:
    """Tools without a CCA option get the flow's (or the burst's chosen) per socket; both ends,
    since either may open the data connections (GridFTP's passive mode)."""
    if run.flow.protocol != "tcp" or run.tool.sets_cca:
        return argv
    return ccashim.wrap(argv, cca or run.cca)


def launch_server(lab, run: FlowRun, server_spec: ServerSpec, out: Path) -> Process:
    return lab.executor(run.receiver).start(with_cca(run, server_spec.argv), label=f"{run.tool.name}-{out.stem}",
                                            stdout=out, stderr=out.with_suffix(".err"))


def wait_ready(lab, run: FlowRun, proc: Process, server_spec: ServerSpec) -> None:
    executor = lab.executor(run.receiver)
    wait_until(lambda: proc.poll() is not None or bool(executor.run(server_spec.ready, check=False).stdout.strip()),
               timeout=READY_TIMEOUT_S, what=f"{run.tool.name} receiver for {run.flow.name} on {run.receiver}")
    if proc.poll() is not None:
        raise RuntimeError(f"{run.tool.name} receiver for {run.flow.name} exited: {proc.read_stderr().strip()[:300]}")


def stop_server(lab, run: FlowRun, server: Process, server_spec: ServerSpec | None) -> None:
    server.stop()
    for argv in (server_spec.cleanup if server_spec else []):
        lab.executor(run.receiver).run(argv, check=False)
