"""What arrived for the trial's UDP flows, counted by each receiver's kernel.

One meter process per receiving host (drivers/agents/port_meter.py: an iptables counter per port,
read every period and printed with the wall clock) for every UDP flow whose tool does not count
arrivals itself. start() returns once every meter's rules are in; stop() stops them, removes any
rule a killed meter left, and returns each port's samples on the trial's clock, which
arrivals.counted turns into a burst's seconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from longhaul.drivers.agents.port_meter import COMMENT
from longhaul.hardware.executors.process import Executor, Process, wait_until

READY_TIMEOUT_S = 30.0      # Python's start and an iptables-restore in a VM under emulation


def meter_argv(ports: list[int], period_s: float, remove: bool = False) -> list[str]:
    return [sys.executable, "-m", "longhaul.drivers.agents.port_meter", "--ports", ",".join(map(str, sorted(ports))),
            "--period", f"{period_s:g}", *(["--remove"] if remove else [])]


def parse(text: str, wall0: float) -> dict[int, list[tuple[float, int, int]]]:
    """A meter's output -> port: [(seconds on the trial's clock, IP bytes, packets), ...]."""
    out: dict[int, list[tuple[float, int, int]]] = {}
    for line in text.splitlines():
        try:
            tick = json.loads(line)
        except ValueError:
            continue
        if "t" not in tick:
            continue
        t_s = round(float(tick["t"]) - wall0, 4)
        for port, (nbytes, packets) in tick["c"].items():
            out.setdefault(int(port), []).append((t_s, int(nbytes), int(packets)))
    return out


class ArrivalMeter:
    def __init__(self, receivers: dict[str, Executor], ports: dict[str, list[int]], workdir: Path,
                 period_s: float = 0.1):
        """receivers: host -> executor; ports: host -> the UDP ports counted there."""
        self.receivers = receivers
        self.ports = {host: sorted(set(p)) for host, p in ports.items() if p}
        self.workdir = Path(workdir)
        self.period_s = period_s
        self.series: dict[int, list[tuple[float, int, int]]] = {}
        self.errors: list[str] = []
        self._procs: dict[str, Process] = {}

    def _out(self, host: str) -> Path:
        return self.workdir / f"arrivals-{host}.jsonl"

    def start(self) -> None:
        for host, ports in self.ports.items():
            self._procs[host] = self.receivers[host].start(
                meter_argv(ports, self.period_s), label=f"arrivals-{host}", stdout=self._out(host),
                stderr=self._out(host).with_suffix(".err"))
        for host, proc in self._procs.items():
            wait_until(lambda proc=proc: proc.poll() is not None or COMMENT in _head(proc), timeout=READY_TIMEOUT_S,
                       what=f"the arrival meter on {host}")
            if proc.poll() is not None:
                raise RuntimeError(f"the arrival meter on {host} exited: {proc.read_stderr().strip()[-300:]}")

    def stop(self, t0: float) -> dict[int, list[tuple[float, int, int]]]:
        """t0: the trial's start (time.monotonic()); the meters print the wall clock."""
        wall0 = time.time() - (time.monotonic() - t0)
        for host, proc in self._procs.items():
            died = proc.poll()
            if died is not None:     # before the trial's end: its seconds stop where it died
                self.errors.append(f"the arrival meter on {host} exited {died} during the trial: "
                                   f"{proc.read_stderr().strip()[-300:]}")
            if proc.stop() != 0:     # killed, or failed: its rules may still be there
                left = self.receivers[host].run(meter_argv(self.ports[host], self.period_s, remove=True), check=False)
                if left.returncode != 0:
                    self.errors.append(f"removing the arrival meter's rules on {host}: "
                                       f"{(left.stderr or left.stdout).strip()[-300:]}")
            self.series.update(parse(proc.read_stdout(), wall0))
        return self.series


def _head(proc: Process) -> str:
    """The meter's header line names its rules' comment once they are in."""
    text = proc.read_stdout()
    return text.splitlines()[0] if text else ""
