"""Replay a (compressed) transfer trace through the lab of the config's backend (seed 003, sections
6 and 7): each transfer a real flow from S1 to D1 through the bottleneck, the all-BE baseline on
the plain lab and the OD/BE split with section 7's BE cap, the paper's metrics measured from the
lab and, beside them, the simulation's of the same trace (record.py's replay.json).

    result = replay(config, compress(trace, ...), od_mask, od_share=0.4, out_dir=Path("replay"))

The backend is whatever the config names (netns, ssh, qemu): the replay opens its session and
builds one single-pair lab from `ReplayLab` as the runner does, and touches only S1, D1 and R1
through their executors: servers on D1, the leg agent (drivers/agents/replay_leg.py: the clients,
the caps) and the class shaper (shaper.py) on S1, S1's tcp_notsent_lowat (below), a reader of R1's
bottleneck counters. Everything it starts or changes is undone on the lab's cleanup stack,
whatever happens; Ctrl-C tears down and keeps the legs done so far.

The simulation's netCap is the bottleneck's TCP goodput: the shaper meters frames (payload +
TCP/IP headers with timestamps + Ethernet), so at MTU 1500 a saturated 100 Mb/s bottleneck moves
1448/1514 x 100 Mb/s of transfer bytes.

The transfers are GridFTP where S1 and D1 have it, else iperf3 (tools.py; `tool` names one).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from longhaul.appliance.config.load import Config
from longhaul.appliance.plan.leg import Leg, LegLab, run_leg
from longhaul.appliance.plan.tools import AUTO, PREFERENCE, REPLAY_TOOLS
from longhaul.collectors.store.provenance import git_revision, host_info, new_run_id, now_iso, tool_versions
from longhaul.collectors.studies.planning.compress import COMPRESSION, compress, rate_factor_for
from longhaul.collectors.studies.planning.metrics import BIN_S
from longhaul.collectors.studies.planning.replay_record import REPLAY, REPLAY_JSON, ReplayResult, write_replay
from longhaul.collectors.studies.planning.settings import ReplaySection
from longhaul.collectors.studies.planning.sim import split_classes
from longhaul.collectors.studies.planning.trace import OD, Trace
from longhaul.core.errors import RunError
from longhaul.core.paths import REPO
from longhaul.core.units import parse_queue
from longhaul.drivers.agents.htb_caps import DEFAULT_HEADROOM
from longhaul.drivers.agents.replay_leg import MODULE as AGENT_MODULE
from longhaul.hardware.backends.base import LabNeeds, LabSpec, LinkSettings, RunContext
from longhaul.hardware.cleanup import CleanupStack, Interrupted, signals_raise
from longhaul.hardware.executors.process import ProcessTable

log = logging.getLogger(__name__)
TCP_IP_HEADERS = 52          # IPv4 20 + TCP 20 + timestamps 12
ETHERNET = 14
# Unsent bytes a sender's socket may hold. iperf3 ends a -n test once its last byte is in the
# socket buffer, and its server closes on the unsent rest: the smaller the unsent part, the closer
# the client's exit is to the transfer's real end (autotuning would let megabytes wait there).
NOTSENT_LOWAT = 16_384
LOWAT_SYSCTL = "net.ipv4.tcp_notsent_lowat"


@dataclass(frozen=True)
class ReplayLab:
    """The lab a replay builds: one pair, the bottleneck the trace's rates were scaled to."""

    bottleneck_rate_mbps: float = 100.0
    access_rate_mbps: float = 1000.0
    rtt_ms: float = 10.0
    queue: str | int = "1bdp"
    cca: str = "cubic"
    mtu: int = 1500
    buffer: str | int = "default"
    tool: str = AUTO          # tools.py's registry, or auto: the first of PREFERENCE the hosts have

    @property
    def queue_bytes(self) -> int:
        return parse_queue(self.queue, self.bottleneck_rate_mbps * 1e6 / 8 * self.rtt_ms / 1e3, self.mtu)

    def spec(self) -> LabSpec:
        return LabSpec(1, self.access_rate_mbps, self.bottleneck_rate_mbps, self.mtu,
                       LinkSettings(self.rtt_ms, self.queue_bytes, self.cca, self.buffer))

    @property
    def goodput_factor(self) -> float:
        """Transfer bytes per frame byte of a full-size TCP segment."""
        return (self.mtu - TCP_IP_HEADERS) / (self.mtu + ETHERNET)

    @property
    def pacing_overhead(self) -> float:
        """Pacing rate / requested rate. TCP paces the payload of the segments in its write queue
        (headers are added after), so a socket paced at a rate moves its payload at that rate:
        measured on the netns lab, uncontended 5 s transfers at 2-40 Mb/s paced at exactly their
        rate took 0.98-1.02 x their reference (2 s ones up to 1.05: a flow's set-up and closing
        round trips)."""
        return 1.0

    @property
    def capacity_bps(self) -> float:
        """The bottleneck's goodput: the simulation's netCap for this lab."""
        return self.bottleneck_rate_mbps * 1e6 * self.goodput_factor


def plan_legs(od: np.ndarray, od_share: float, load_ratios: Sequence[float] = (1.0,),
              baseline: bool = True) -> list[Leg]:
    """Section 6.2's experiments: per load ratio, the all-BE baseline (no cap) then the split."""
    od = np.asarray(od, dtype=bool)
    legs = []
    for ratio in load_ratios:
        suffix = f"-x{ratio:g}" if len(load_ratios) > 1 else ""
        if baseline:
            legs.append(Leg(f"baseline{suffix}", np.zeros_like(od), 0.0, ratio, capped=False))
        legs.append(Leg(f"scheduled{suffix}", od, od_share, ratio, capped=True))
    return legs


def default_bin_s(trace: Trace, interval_s: float = 1.0) -> float:
    """Section 5.5's 1-minute bins, compressed with the trace's times."""
    gen = trace.generator or {}
    factor = gen.get("time_factor", 1.0) if gen.get("kind") == COMPRESSION else 1.0
    return max(interval_s, BIN_S * factor)


def replay(config: Config, trace: Trace, od: np.ndarray, od_share: float, out_dir: Path, *,
           lab: ReplayLab | None = None, load_ratios: Sequence[float] = (1.0,), baseline: bool = True,
           headroom: float = DEFAULT_HEADROOM, interval_s: float = 1.0, bin_s: float | None = None,
           progress: Callable[[str], None] | None = None) -> ReplayResult:
    """Run the legs (plan_legs) on one lab of the config's backend; out_dir gets replay.json
    (rewritten after every leg) and raw/<leg>/ (every client's JSON, the servers' logs)."""
    lab = lab or ReplayLab()
    od = np.asarray(od, dtype=bool)
    if len(od) != len(trace.transfers):
        raise ValueError(f"{len(od)} classes for {len(trace.transfers)} transfers")
    if not trace.transfers:
        raise ValueError("an empty trace has nothing to replay")
    say = getattr(progress, "message", progress) or log.info
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    replay_id = new_run_id()
    legs = plan_legs(od, od_share, load_ratios, baseline)
    header = _header(config, trace, lab, replay_id, od_share, load_ratios)
    result = ReplayResult(out_dir / REPLAY_JSON, header)
    procs = ProcessTable()
    ctx = RunContext(tag=replay_id[-6:], run_dir=out_dir, lab_dir=out_dir / "lab", procs=procs, say=say)
    needs = _needs(lab)
    try:
        with signals_raise(), config.backend.session(config.lab, needs, ctx) as session:
            _check_session(session, lab)
            header["features"] = session.features.as_dict()
            _run(session, lab, legs, trace, result, ctx, headroom, interval_s,
                 bin_s if bin_s is not None else default_bin_s(trace, interval_s), say)
        header["status"] = "complete"
    except Interrupted:
        header["status"] = "interrupted"
        raise
    except Exception as exc:
        header.update(status="failed", error=str(exc))
        raise
    finally:
        header["finished"] = now_iso()
        write_replay(result)
    return result


def lab_trace(trace: Trace, settings: ReplaySection, lab: ReplayLab) -> Trace:
    """The trace the lab replays (section 6.2): thinned to one in keep_one_in, times compressed
    by the same factor unless span_s is set, rates scaled so its peak demand fills the lab's
    bottleneck goodput."""
    span = settings.span_s or trace.span_s() / settings.keep_one_in
    shaped = dict(keep_one_in=settings.keep_one_in, span_s=span, seed=settings.seed)
    factor = rate_factor_for(compress(trace, **shaped), lab.capacity_bps)
    return compress(trace, **shaped, rate_factor=factor)


def replay_plan(config: Config, trace: Trace, settings: ReplaySection, out_dir: Path,
                progress: Callable[[str], None] | None = None) -> ReplayResult:
    """A plan's replay: its [replay] settings' lab, trace, classes and legs."""
    lab = ReplayLab(bottleneck_rate_mbps=settings.bottleneck_mbps, rtt_ms=settings.rtt_ms, queue=settings.queue,
                    cca=settings.cca, tool=settings.tool)
    replayed = lab_trace(trace, settings, lab)
    od = (np.array([t.cls == OD for t in replayed.transfers]) if replayed.labelled()   # the log's own classes
          else split_classes(len(replayed.transfers), settings.od_transfers_pct / 100, settings.seed))
    return replay(config, replayed, od, settings.od_bandwidth_pct / 100, out_dir, lab=lab,
                  load_ratios=settings.load_ratios, progress=progress)


def _check_session(session, lab: ReplayLab) -> None:
    if session.runs_tools_here and not shutil.which("tc"):
        raise RunError("the replay runs tc on this machine: not installed (make setup)")
    if session.congestion_controls is not None and lab.cca not in session.congestion_controls:
        raise RunError(f"congestion control {lab.cca} is not available on the lab's hosts "
                       f"(available: {', '.join(session.congestion_controls)})")


def _run(session, lab: ReplayLab, legs: list[Leg], trace: Trace, result: ReplayResult, ctx: RunContext,
         headroom: float, interval_s: float, bin_s: float, say) -> None:
    workdir = ctx.lab_dir / "lab-1"
    workdir.mkdir(parents=True, exist_ok=True)
    lab_cleanup = CleanupStack()
    with CleanupStack() as cleanup:
        # the lab goes first, then what is still running: the session's own processes (the qemu
        # fleet's VMs) are in the table too, and the lab's teardown needs them
        cleanup.push("stop processes", ctx.procs.stop_all)
        cleanup.push("tear down lab", lambda: _close(lab_cleanup))
        built = session.lab(lab.spec(), f"{ctx.tag}1", lab_cleanup, workdir)
        say(f"building the replay's lab: {lab.bottleneck_rate_mbps:g} Mb/s, {lab.rtt_ms:g} ms, "
            f"queue {lab.queue_bytes} B, {lab.cca}")
        built.build()
        sender, receiver = built.executor("S1"), built.executor("D1")
        _check_agent(sender)
        tool, passed_over = choose_tool(lab.tool, sender, receiver, built.address("D1"))
        result.header.update(tool=tool.name, tools_passed_over=passed_over)
        say(f"replay transfers: {tool.name}" + (f" (not {'; '.join(passed_over)})" if passed_over else ""))
        _set_notsent_lowat(sender, lab_cleanup)
        workdir = receiver.run(["mktemp", "-d", "/tmp/longhaul-replay.XXXXXX"]).stdout.strip()
        lab_cleanup.push(f"remove the replay's scratch on {receiver.name}",
                         lambda: receiver.run(["rm", "-rf", workdir], check=False))
        result.header["lab_hosts"] = {name: _kernel(ex) for name, ex in (("S1", sender), ("D1", receiver))}
        leg_lab = LegLab(sender=sender, receiver=receiver, receiver_address=built.address("D1"),
                         ifname=built.topo.access_link("S1").a.ifname, router=built.executor("R1"),
                         router_ifname=built.topo.bottleneck().a.ifname, router_os=built.router_os("R1"),
                         access_bps=built.topo.access_link("S1").rate_mbps * 1e6,
                         bottleneck_bps=lab.bottleneck_rate_mbps * 1e6, capacity_bps=lab.capacity_bps,
                         goodput_factor=lab.goodput_factor, pacing_overhead=lab.pacing_overhead, mtu=lab.mtu,
                         cca=lab.cca, headroom=headroom, interval_s=interval_s, bin_s=bin_s, tool=tool,
                         receiver_workdir=workdir)
        for leg in legs:
            say(f"replay leg {leg.name}: {len(trace.transfers)} transfers, load x{leg.load_ratio:g}, "
                + (f"OD share {leg.od_share:.0%}, BE capped" if leg.capped else "all BE, no cap"))
            started = time.monotonic()
            done = run_leg(leg_lab, leg, trace, ctx.run_dir / "raw" / leg.name, say)
            result.legs.append(done)
            write_replay(result)
            summary = done.summary()
            say(f"replay leg {leg.name} done in {time.monotonic() - started:.0f} s: "
                f"avg BS OD {_fmt(summary['avg_bs_od'])}, BE {_fmt(summary['avg_bs_be'])}"
                + (f"; {len(done.errors)} error(s)" if done.errors else ""))


def _needs(lab: ReplayLab) -> LabNeeds:
    """What the session's preflight checks before anything is built: the named tool's programs, or
    with auto iperf3's (the fallback; GridFTP is looked for on the built lab, choose_tool)."""
    tool = REPLAY_TOOLS[PREFERENCE[-1] if lab.tool == AUTO else lab.tool]
    return LabNeeds(1, (tool.name,), (lab.cca,), (*dict.fromkeys((*tool.sender_executables,
                                                                 *tool.receiver_executables)), "tc"))


def _check_agent(sender) -> None:
    """The leg agent runs on S1 from longhaul's own tree there (an image or a host's checkout)."""
    done = sender.run([sys.executable, "-c", f"import {AGENT_MODULE}"], check=False, timeout=120)
    if done.returncode != 0:
        raise RunError(f"{sender.name} cannot run the replay's leg agent ({sys.executable} -m {AGENT_MODULE}): "
                       f"{(done.stderr.strip().splitlines() or ['?'])[-1]}; its longhaul is older than this one "
                       "(qemu: make image; ssh: update the host's checkout)")


_MISSING_SH = 'for x; do case "$x" in /*) test -e "$x" ;; *) command -v "$x" >/dev/null ;; esac || echo "$x"; done'


def missing_on(executor, needed: Sequence[str]) -> list[str]:
    """Which of the programs (by name) and files (by absolute path) the host lacks."""
    if not needed:
        return []
    return executor.run(["sh", "-c", _MISSING_SH, "sh", *needed]).stdout.split()


def choose_tool(setting: str, sender, receiver, receiver_address: str) -> tuple[object, list[str]]:
    """The named tool, or with auto the first of PREFERENCE that S1 and D1 can run, and why each
    tool before it could not; RunError naming what is missing when none can."""
    passed_over = []
    for name in PREFERENCE if setting == AUTO else (setting,):
        tool = REPLAY_TOOLS[name]
        missing = ([f"{sender.name}: {m}" for m in missing_on(sender, (*tool.sender_executables, *tool.sender_files()))]
                   + [f"{receiver.name}: {m}" for m in missing_on(receiver, (*tool.receiver_executables,
                                                                            *tool.receiver_files()))])
        if not missing:
            missing = [f"{receiver.name}: {why}" for argv, why in tool.receiver_checks(receiver_address)
                       if receiver.run(argv, check=False).returncode != 0]
        if not missing:
            return tool, passed_over
        passed_over.append(f"{name}: {', '.join(missing)}")
    raise RunError(f"the replay's transfers need a tool the lab's hosts can run: {'; '.join(passed_over)}")


def _close(stack: CleanupStack) -> None:
    failures = stack.close()
    if failures:
        log.error("replay lab teardown problems: %s", "; ".join(failures))


def _set_notsent_lowat(sender, cleanup: CleanupStack) -> None:
    before = sender.run(["sysctl", "-n", LOWAT_SYSCTL], check=False).stdout.strip()
    if before:
        cleanup.push(f"restore {LOWAT_SYSCTL} on {sender.name}",
                     lambda: sender.run(["sysctl", "-q", "-w", f"{LOWAT_SYSCTL}={before}"], check=False))
    sender.run(["sysctl", "-q", "-w", f"{LOWAT_SYSCTL}={NOTSENT_LOWAT}"])


def _kernel(executor) -> str | None:
    return executor.run(["uname", "-r"], check=False).stdout.strip() or None


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _header(config: Config, trace: Trace, lab: ReplayLab, replay_id: str, od_share: float,
            load_ratios: Sequence[float]) -> dict:
    return {
        **REPLAY.stamp(), "replay_id": replay_id, "started": now_iso(), "finished": None,
        "status": "running", "error": None, "longhaul": git_revision(REPO).to_dict(), "host": host_info().to_dict(), "tool": None,
        "tools_passed_over": [],
        "backend": config.backend.name, "features": None, "lab_hosts": {}, "tools": tool_versions(),
        "trace": {"name": trace.name, "transfers": len(trace.transfers), "sources": list(trace.sources),
                  "generator": json.loads(json.dumps(trace.generator, default=str))},
        "lab": {**asdict(lab), "queue_bytes": lab.queue_bytes, "capacity_bps": lab.capacity_bps,
                "goodput_factor": lab.goodput_factor, "pacing_overhead": lab.pacing_overhead,
                "notsent_lowat": NOTSENT_LOWAT},
        "od_share": od_share, "load_ratios": list(load_ratios),
    }
