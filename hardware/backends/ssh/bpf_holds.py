"""longhaul's BPF congestion controls on the hosts of an SSH (or qemu) session: a profile that names
one (`lh_frac10`, `lh_htcp`, ...) gets it registered on every end host whose kernel lacks it, for
the whole session, by a holder process on that host (hardware/bpf_hold.py: it unregisters when
it ends, and the SSH session's end ends it). Started one host after another, each once it says it
holds: end hosts that share a kernel (network namespaces of one machine) register it once."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from longhaul.hardware import bpf_ccas
from longhaul.hardware.executors.process import wait_until

log = logging.getLogger(__name__)

READY_S = 60.0          # bpftool loads and verifies each program: seconds on a TCG VM


def bpf_names(ccas) -> tuple[str, ...]:
    """The congestion controls of a run that are longhaul's BPF ones."""
    return tuple(c for c in dict.fromkeys(ccas) if c in bpf_ccas.BPF_CCAS)


def hold_argv(names, check: bool = False) -> list[str]:
    """The holder on a host; the controller's python is mapped to the host's by the executor."""
    return [sys.executable, "-m", "longhaul.hardware.bpf_hold", *(["--check"] if check else []), *names]


class BpfHolds:
    """One holder per end host, from the first lab that uses the host to the session's end."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.held: dict[str, dict] = {}         # machine -> what its holder said
        self._procs: dict[str, object] = {}

    def ensure(self, machines: dict[str, object], workdir: Path) -> None:
        """machines: inventory name -> executor, for the end hosts of the lab about to be built."""
        for machine, executor in machines.items():
            if not self.names or machine in self._procs:
                continue
            out = workdir / f"bpf-hold-{machine}.json"
            proc = executor.start(hold_argv(self.names), label=f"bpf-hold-{machine}", stdout=out,
                                  stderr=workdir / f"bpf-hold-{machine}.log")
            self._procs[machine] = proc
            wait_until(lambda p=proc, o=out: p.poll() is not None or _said(o) is not None, READY_S, interval=0.1,
                       what=f"the BPF congestion controls' holder on {machine}")
            said = _said(out)
            if said is None:
                raise RuntimeError(f"{machine}: the BPF congestion controls could not be registered: "
                                   f"{proc.read_stderr().strip()[-300:]}")
            self.held[machine] = said

    def record(self, machines) -> dict[str, dict]:
        return {m: self.held[m] for m in machines if m in self.held}

    def close(self) -> None:
        """End every holder (each unregisters what it registered); say which could not."""
        for machine, proc in reversed(list(self._procs.items())):
            status = proc.stop(term_timeout=30)
            if status != 0:
                log.error("%s: the BPF congestion controls' holder ended with %s: %s", machine, status,
                          proc.read_stderr().strip()[-300:])
        self._procs.clear()


def _said(path: Path) -> dict | None:
    try:
        line = path.read_text().partition("\n")[0]
    except OSError:
        return None
    return json.loads(line) if line.endswith("}") else None
