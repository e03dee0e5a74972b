"""A run's hold on longhaul's BPF congestion controls on a host it reaches over SSH (a real host, a
qemu VM): `python -m longhaul.hardware.bpf_hold NAME...` on that host registers each NAME its
kernel lacks, says so on one JSON line, and keeps them until it is told to end (TERM, INT or HUP),
then unregisters what it registered and exits 0.

A process rather than a record on the host: the SSH executor's watcher sends TERM to it when the
session ends for any reason (the controller killed, the link lost), so a run that dies cannot leave
a congestion control registered on a host it no longer reaches, and no `longhaul clean` on the
controller has to reach it. Signals are blocked before the first registration, so one arriving
while it registers is taken after it, and what was registered is still unregistered.

`--check NAME...` says whether this host could register them (BTF, the JIT, bpftool, the objects
built) and exits 1 with the reason if not: the readiness row of `longhaul check --inventory`.
The machine's own runs (the netns lab) keep their hold in hardware/bpf_ccas.py's Holding.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from longhaul.hardware import bpf_ccas

ENDS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def problem(names: list[str]) -> str | None:
    """Why this host cannot register `names`, or None."""
    unknown = [n for n in names if n not in bpf_ccas.BPF_CCAS]
    if unknown:
        return f"not longhaul's BPF congestion controls: {' '.join(unknown)} (known: {' '.join(bpf_ccas.BPF_CCAS)})"
    lacking = [n for n in names if n not in bpf_ccas.kernel_ccas()]
    missing = [n for n in lacking if not bpf_ccas.BPF_CCAS[n].object.is_file()]
    if missing:
        return bpf_ccas.missing_reason(missing[0])
    return bpf_ccas.unavailable_reason() if lacking else None


def hold(names: list[str]) -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, ENDS)
    registered: list[str] = []
    present = [n for n in names if n in bpf_ccas.kernel_ccas()]
    try:
        for name in (n for n in dict.fromkeys(names) if n not in present):
            bpf_ccas.register(name)
            registered.append(name)
        print(json.dumps({"registered": registered, "present": present,
                          "sha256": {n: bpf_ccas.BPF_CCAS[n].sha256() for n in registered}}), flush=True)
        signal.sigwait(ENDS)
    except RuntimeError as exc:
        print(f"bpf_hold: {exc}", file=sys.stderr, flush=True)
        return _release(registered) or 1
    return _release(registered)


def _release(registered: list[str]) -> int:
    status = 0
    for name in reversed(registered):
        try:
            bpf_ccas.unregister(name)
        except RuntimeError as exc:
            print(f"bpf_hold: {name} stays registered: {exc}", file=sys.stderr, flush=True)
            status = 2
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m longhaul.hardware.bpf_hold", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only say whether this host could register them")
    ap.add_argument("names", nargs="+", metavar="NAME")
    args = ap.parse_args(argv)
    if args.check:
        why = problem(args.names)
        print(why or "can register " + " ".join(args.names))
        return 1 if why else 0
    why = problem(args.names)
    if why:
        print(f"bpf_hold: {why}", file=sys.stderr)
        return 1
    return hold(args.names)


if __name__ == "__main__":
    sys.exit(main())
