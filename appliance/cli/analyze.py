"""`longhaul analyze profile` and `longhaul advise`: seed 001's throughput-profile analysis.

    longhaul analyze profile RUN_DIR|CSV [--traces CSV] [--capacity MBPS] [--no-dynamics] [--json]
    longhaul advise (--rtt MS | --to HOST) --from RUN_DIR|CSV [--cca NAME]... [--buffer NAME]... [--json]

With --json each prints one JSON object on stdout (the machine-readable interface, documented in
docs/throughput-profiles.md); without it, tables for a person. Bad input exits 2, an unreachable
host for --to exits 1.
"""
from __future__ import annotations

# The studies' modules are imported inside the commands, for start-up: they bring numpy, scipy and
# matplotlib, which `longhaul --help` and every other command should not wait for.
import json
import math
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from longhaul.core.documents import DocumentFormat
from longhaul.core.errors import ConfigError, RunError

ANALYSIS = DocumentFormat("longhaul-profile-analysis", 1, "a profile analysis")


def register(sub) -> None:
    """Add `analyze` (sub-command `profile`) and `advise` to the `longhaul` argument parser."""
    analyze = sub.add_parser("analyze", help="analyses of a run directory or a CSV of trials")
    kinds = analyze.add_subparsers(dest="analysis", required=True)
    prof = kinds.add_parser("profile", help="throughput profiles, transition RTTs, dynamics (seed 001)")
    prof.add_argument("source", type=Path, metavar="RUN_DIR|CSV",
                      help="a run directory, or a CSV with columns cca,streams,buffer,rtt_ms,repeat,mbps")
    _source_options(prof)
    prof.add_argument("--capacity", type=float, metavar="MBPS",
                      help="bottleneck rate that scales profiles for the sigmoid fit (default: the "
                           "run's bottleneck rate, else the best profile mean)")
    prof.add_argument("--no-dynamics", action="store_true", help="skip the Poincare/Lyapunov part")
    prof.add_argument("--json", action="store_true", help="print one JSON object")
    prof.set_defaults(func=cmd_analyze_profile)

    advise = sub.add_parser("advise", help="which TCP variant, streams and buffer for an RTT (seed 001 sec. 5)")
    where = advise.add_mutually_exclusive_group(required=True)
    where.add_argument("--rtt", type=float, metavar="MS", help="the connection's RTT in ms")
    where.add_argument("--to", metavar="HOST", help="measure the RTT to HOST from this machine (fping)")
    advise.add_argument("--from", dest="source", type=Path, required=True, metavar="RUN_DIR|CSV",
                        help="the measured profiles: a run directory or a CSV of trials")
    _source_options(advise)
    advise.add_argument("--cca", action="append", metavar="NAME", help="only these variants (repeatable)")
    advise.add_argument("--buffer", action="append", metavar="NAME", help="only these buffers (repeatable)")
    advise.add_argument("--max-streams", type=int, metavar="N", help="at most N parallel streams")
    advise.add_argument("--json", action="store_true", help="print one JSON object")
    advise.set_defaults(func=cmd_advise)


def _source_options(parser) -> None:
    parser.add_argument("--traces", type=Path, metavar="CSV",
                        help="per-second traces of a CSV's trials, one file: "
                             "cca,streams,buffer,rtt_ms,repeat,t_s,stream,mbps")


# ---- the analysis (shared with bench/analyze_profile.py) ---------------------------------------

def load(source: Path, traces: Path | None = None):
    from longhaul.collectors.studies.throughput_profile.analysis import InputError, load_trials
    try:
        return load_trials(source, traces)
    except InputError as exc:
        raise ConfigError(exc.path, exc.line, (), exc.value, exc.allowed) from None


def analyze_profile(source: Path, traces: Path | None = None, capacity: float | None = None,
                    dynamics: bool = True) -> dict:
    """The study's analysis (throughput_profile.study.analyse, which the report's section draws
    too) as one JSON-able dict: profiles, box statistics, transition RTTs and optionally dynamics."""
    from longhaul.collectors.studies.throughput_profile import dynamics as dyn
    from longhaul.collectors.studies.throughput_profile.analysis import box_stats
    from longhaul.collectors.studies.throughput_profile.study import analyse

    result = analyse(load(source, traces), capacity, dynamics)
    out = {**ANALYSIS.stamp(), "source": str(source), "trials": len(result.trials),
           "capacity_mbps": result.capacity_mbps, "capacity_source": result.capacity_source,
           "rtts_ms": result.rtts_ms,
           "profiles": [{**_key(c), "points": [
               {"rtt_ms": float(r), "mean_mbps": float(m), "std_mbps": float(s), "n": int(n),
                "box": box_stats(samples)}
               for r, m, s, n, samples in zip(p.rtt_ms, p.mean, p.std, p.n, p.samples)]}
               for c, p in result.profiles.items()],
           "transitions": [{**_key(c), **f.as_dict()} for c, f in result.fits.items()],
           "dynamics": None}
    if result.traces is not None:
        traced = result.traces
        out["dynamics"] = {
            "traces": len(traced), "missing": result.missing_traces,
            "estimator": "per trace: mean ln|dM/dX| with dM/dX from the nearest state; spread: std of "
                         "the successive-point estimates ln|(X[i+2]-X[i+1])/(X[i+1]-X[i])|",
            "per_cell": dyn.summarise(traced),
            "throughput_vs_exponent": dyn.throughput_vs_exponent(traced),
            "per_trace": [{**_key(d.trial.config), "rtt_ms": d.trial.rtt_ms, "repeat": d.trial.repeat,
                           "mean_mbps": d.mean_mbps, "lyapunov": d.exponent, "spread": d.spread,
                           "points": d.points, "stream_lyapunov": d.stream_exponents} for d in traced]}
    return _finite(out)


def _key(config) -> dict:
    return {"cca": config.cca, "streams": config.streams, "buffer": config.buffer}


def _finite(value):
    """JSON has no NaN: undefined numbers become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def advise(source: Path, rtt_ms: float, traces: Path | None = None, **filters):
    from longhaul.collectors.studies.throughput_profile.analysis import build_profiles
    from longhaul.collectors.studies.throughput_profile.transport_selection import select

    profiles = build_profiles(load(source, traces))
    try:
        return select(profiles, rtt_ms, **filters)
    except ValueError as exc:
        raise ConfigError.option("--cca/--buffer/--max-streams", None, str(exc)) from None


def measure_rtt(host: str) -> float:
    """Section 5.1 step 1: the RTT to the destination, from this machine (bursts of ICMP echoes)."""
    from longhaul.hardware.executors.process import LocalExecutor, ProcessTable
    from longhaul.hardware.path_rtt import idle_rtt

    rtt = idle_rtt(LocalExecutor("controller", ProcessTable()), host)
    if rtt is None:
        raise RunError(f"no RTT to {host}: it did not answer ICMP echo (reachable? ICMP allowed?)")
    return rtt


# ---- commands -------------------------------------------------------------------------------------

def cmd_analyze_profile(args) -> int:
    if args.capacity is not None and not (math.isfinite(args.capacity) and args.capacity > 0):
        raise ConfigError.option("--capacity", args.capacity, "a rate in Mb/s > 0")
    result = analyze_profile(args.source, args.traces, args.capacity, not args.no_dynamics)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        _print_analysis(result)
    return 0


def cmd_advise(args) -> int:
    if args.rtt is not None and not (math.isfinite(args.rtt) and args.rtt >= 0):
        raise ConfigError.option("--rtt", args.rtt, "an RTT in ms >= 0")
    if args.max_streams is not None and args.max_streams < 1:
        raise ConfigError.option("--max-streams", args.max_streams, "a whole number >= 1")
    rtt = args.rtt if args.rtt is not None else measure_rtt(args.to)
    selection = advise(args.source, rtt, args.traces, ccas=args.cca, buffers=args.buffer,
                       max_streams=args.max_streams)
    if args.json:
        doc = {"rtt_source": "given" if args.rtt is not None else "measured", "target": args.to,
               **selection.as_dict()}
        json.dump(_finite(doc), sys.stdout, indent=1)
        print()
        return 0
    console = Console()
    how = "given" if args.rtt is not None else f"measured to {args.to}"
    console.print(f"RTT {rtt:g} ms ({how}): use [bold]{selection.best.config.label}[/bold] "
                  f"(cca / streams / buffer), expected {selection.best.expected_mbps:.0f} Mb/s")
    console.print(selection.statement)
    table = Table(title="best configurations at this RTT")
    for col in ("cca", "streams", "buffer", "expected Mb/s", "95% CI", "measured at (ms)"):
        table.add_column(col)
    for e in selection.ranking[:5]:
        ci = f"{e.ci_mbps[0]:.0f}-{e.ci_mbps[1]:.0f}" if e.ci_mbps else "-"
        table.add_row(e.config.cca, str(e.config.streams), e.config.buffer, f"{e.expected_mbps:.0f}", ci,
                      " / ".join(f"{r:g}" for r in dict.fromkeys(e.bracket_ms)))
    console.print(table)
    return 0


def _mean_std(point: dict) -> str:
    # one repeat has no spread: its std (0.0 in the JSON) is not printed as "± 0"
    return f"{point['mean_mbps']:.0f}" + (f" ± {point['std_mbps']:.0f}" if point["n"] >= 2 else "")


def _print_analysis(result: dict) -> None:
    console = Console()
    rtts = result["rtts_ms"]
    console.print(f"{result['source']}: {result['trials']} trials, {len(result['profiles'])} configurations, "
                  f"RTTs {', '.join(f'{r:g}' for r in rtts)} ms; profiles scaled by "
                  f"{result['capacity_mbps']:.0f} Mb/s ({result['capacity_source']}) for the sigmoid fit")
    table = Table(title="throughput profiles: mean ± std over repeats (Mb/s)")
    for col in ("cca", "streams", "buffer", *(f"{r:g} ms" for r in rtts)):
        table.add_column(col, justify="right")
    for p in result["profiles"]:
        at = {pt["rtt_ms"]: pt for pt in p["points"]}
        table.add_row(p["cca"], str(p["streams"]), p["buffer"],
                      *(_mean_std(at[r]) if r in at else "-" for r in rtts))
    console.print(table)
    table = Table(title="transition RTT tauT (ms), concave below, convex above (seed 001 Fig. 10)")
    for col in ("cca", "streams", "buffer", "tauT", "profile", "SSE"):
        table.add_column(col, justify="right")
    for f in result["transitions"]:
        table.add_row(f["cca"], str(f["streams"]), f["buffer"], f"{f['tau_t_ms']:g}", f["kind"], f"{f['sse']:.4f}")
    console.print(table)
    dyn = result["dynamics"]
    if dyn is None:
        return
    table = Table(title=f"dynamics: Lyapunov exponent of the aggregate trace, mean over repeats "
                        f"({dyn['traces']} traces, {dyn['missing']} without a trace)")
    for col in ("cca", "streams", "buffer", *(f"{r:g} ms" for r in rtts)):
        table.add_column(col, justify="right")
    rows: dict[tuple, dict] = {}
    for c in dyn["per_cell"]:
        rows.setdefault((c["cca"], c["streams"], c["buffer"]), {})[c["rtt_ms"]] = c["lyapunov_mean"]
    for (cca, streams, buffer), at in rows.items():
        table.add_row(cca, str(streams), buffer,
                      *("-" if at.get(r) is None else f"{at[r]:+.2f}" for r in rtts))
    console.print(table)
    rho = dyn["throughput_vs_exponent"]["spearman"]
    if rho is not None:
        console.print(f"throughput vs Lyapunov exponent over traces (Fig. 14): Spearman rho = {rho:+.2f}"
                      f" ({'higher exponent, lower throughput' if rho < 0 else 'no decreasing relation'})")
