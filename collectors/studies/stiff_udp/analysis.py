"""Seed 002's "stiff" sinusoidal UDP test (section VI.A-B): f(t), theoretical capacity T, effectiveness,
sqrt(p) of the UDP loss and the fping RTT under load.

Units throughout: rates in Mb/s (10^6 bit/s), times in seconds, capacities of eq. (8) in megabits
(Mb/s x s), bytes in bytes, RTTs in milliseconds (fping's unit).

Checked against the paper's own numbers (tests/studies/test_stiff_udp.py): with M = 100 Mb/s, tau = 240 s,
period = 10 s and I = 1.09 Mb/s, eq. (8) / 8 gives T = 2801.49 MB for UDP 1-10 Mb/s and 1014.61 MB
for UDP 50-80 Mb/s; the paper prints 2801.5 and 1014.6 (Tables I, II).

c defaults to the paper's literal 0.05 pi period. drivers/paced_udp paces with c = period / (2 pi)
(a cycle of exactly period_s), so analyse its runs with c_s=period_s / (2 * math.pi).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

BITS_PER_BYTE = 8
MBIT = 1e6


def _number(name: str, value, *, minimum: float | None = 0.0, positive: bool = False) -> float:
    """`value` as a finite float, else ValueError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, not {value!r}")  # noqa: TRY004 - one error type for callers
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, not {value!r}")
    if positive and x <= 0:
        raise ValueError(f"{name} must be > 0, not {value!r}")
    if minimum is not None and x < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, not {value!r}")
    return x


def sinusoid_c(period_s: float, c_s: float | None = None) -> float:
    """The time constant c of eq. (3), in seconds: c = 0.05 * pi * period, literally as printed.

    This is not period / (2 pi): cos(t/c) repeats every 2 pi c = 0.1 pi^2 period = 0.987 period
    (9.87 s for the paper's 10 s). Kept literal because the printed T values need it: with
    c = period / (2 pi) Table I minus Table II would be 1785.0 MB, not the printed 1786.9 MB.

    c_s, when given, overrides it (seconds), for a generator that paces with another c (e.g.
    period / (2 pi), a cycle of exactly `period_s`): every function here that takes period_s also
    takes c_s, so T is computed for the f(t) that was actually sent.
    """
    period = _number("period_s", period_s, positive=True)
    return 0.05 * math.pi * period if c_s is None else _number("c_s", c_s, positive=True)


def _avg(min_mbps: float, max_mbps: float) -> float:
    lo = _number("min_mbps", min_mbps)
    hi = _number("max_mbps", max_mbps)
    if hi < lo:
        raise ValueError(f"max_mbps ({hi:g}) must be >= min_mbps ({lo:g})")
    return (hi - lo) / 2.0


def udp_rate_mbps(t_s: float, min_mbps: float, max_mbps: float, period_s: float, *,
                  c_s: float | None = None) -> float:
    """The stiff UDP rate f(t) in Mb/s at time t (s), eq. (3): f(t) = Avg cos(t/c) + Min + Avg.

    Avg = (Max - Min) / 2, c = 0.05 pi period (see `sinusoid_c`). f(0) = Max, the minimum Min
    comes after half a cycle; the paper starts the UDP and TCP transfers together (t = 0).
    """
    avg = _avg(min_mbps, max_mbps)
    t = _number("t_s", t_s)
    return avg * math.cos(t / sinusoid_c(period_s, c_s)) + float(min_mbps) + avg


def rate_schedule(duration_s: float, step_s: float, min_mbps: float, max_mbps: float,
                  period_s: float, *, c_s: float | None = None) -> list[tuple[float, float]]:
    """[(t s, f(t) Mb/s)] every `step_s` from 0 up to (excluding) `duration_s`: a pacing plan."""
    duration = _number("duration_s", duration_s)
    step = _number("step_s", step_s, positive=True)
    count = math.ceil(duration / step - 1e-9)
    return [(i * step, udp_rate_mbps(i * step, min_mbps, max_mbps, period_s, c_s=c_s)) for i in range(count)]


def icmp_rate_mbps(packet_bytes: float = 1440, interval_s: float = 0.010) -> float:
    """The fping load I of eq. (4) in Mb/s: one `packet_bytes` packet every `interval_s` seconds.

    The paper's 1440 B every 10 ms gives 1.152 Mb/s, but its printed T values imply I = 1.09 Mb/s
    (collectors/seed002_reference.IMPLIED_ICMP_MBPS); pass the I you measured or want.
    """
    size = _number("packet_bytes", packet_bytes, positive=True)
    return size * BITS_PER_BYTE / _number("interval_s", interval_s, positive=True) / MBIT


def _check_capacity_args(duration_s, link_mbps, min_mbps, max_mbps, period_s, icmp_mbps, c_s):
    tau = _number("duration_s", duration_s)
    link = _number("link_mbps", link_mbps, positive=True)
    icmp = _number("icmp_mbps", icmp_mbps)
    if icmp >= link:
        raise ValueError(f"icmp_mbps ({icmp:g}) must be below link_mbps ({link:g})")
    avg = _avg(min_mbps, max_mbps)
    return tau, link, icmp, avg, float(min_mbps), sinusoid_c(period_s, c_s)


def capacity_closed_form_mbit(duration_s: float, link_mbps: float, min_mbps: float, max_mbps: float,
                              period_s: float, icmp_mbps: float = 0.0, *,
                              c_s: float | None = None) -> float:
    """Theoretical TCP capacity T in megabits over [0, tau], eq. (8), implemented literally:

        T = (M - I) tau - Avg [c sin(tau/c) + tau (Min/Avg) + tau]

    M = link_mbps (the bottleneck capacity, Mb/s), I = icmp_mbps (fping load, Mb/s), tau =
    duration_s (s). Divide by 8 for the paper's MB, or use `theoretical_capacity_bytes`.

    Eq. (8) is the integral of eq. (5) with f(t) of eq. (3). Eq. (7) as printed,
    Avg{cos(t/c) + Min + Avg}, would multiply Min and Avg by Avg too; that is a bracket slip, since
    eq. (8) (and the printed T) follow from Avg cos(t/c) + Min + Avg. With Min = Max (Avg = 0) the
    literal Min/Avg is 0/0; the limit Avg * tau * Min/Avg = Min * tau is used.

    No clipping: if the UDP background ever exceeds M - I this is not the capacity available to TCP
    (eq. (5) then counts the overload as negative capacity and T can go below 0); see
    `theoretical_capacity_mbit`.
    """
    tau, link, icmp, avg, lo, c = _check_capacity_args(duration_s, link_mbps, min_mbps, max_mbps,
                                                       period_s, icmp_mbps, c_s)
    if avg == 0:
        return (link - icmp) * tau - lo * tau
    return (link - icmp) * tau - avg * (c * math.sin(tau / c) + tau * (lo / avg) + tau)


def capacity_numeric_mbit(duration_s: float, link_mbps: float, min_mbps: float, max_mbps: float,
                          period_s: float, icmp_mbps: float = 0.0, *, clip: bool = False,
                          steps: int | None = None, c_s: float | None = None) -> float:
    """T in megabits by numerically integrating eq. (5), int_0^tau g(t) - f(t) dt, with g = M - I (eq. 4).

    Composite Simpson's rule on `steps` intervals (default: 400 per cycle of f, 4000 with clip, at
    least 2000), so it checks `capacity_closed_form_mbit` independently of the algebra of eq. (8)
    (agreement ~1e-12 relative). clip=True integrates max(0, g - f) instead: the capacity actually
    left to TCP when the UDP background goes above M - I (kinks there: ~1e-6 relative).
    """
    tau, link, icmp, avg, lo, c = _check_capacity_args(duration_s, link_mbps, min_mbps, max_mbps,
                                                       period_s, icmp_mbps, c_s)
    if tau == 0:
        return 0.0
    if steps is None:
        per_cycle = 4000 if clip else 400        # kinks converge slower than h^4: finer grid
        steps = max(2000, int(per_cycle * tau / (2 * math.pi * c)))
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise ValueError(f"steps must be an int >= 2, not {steps!r}")
    steps += steps % 2                      # Simpson needs an even count
    t = np.linspace(0.0, tau, steps + 1)
    y = (link - icmp) - (avg * np.cos(t / c) + lo + avg)
    if clip:
        y = np.maximum(y, 0.0)
    h = tau / steps
    return float(h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()))


def theoretical_capacity_mbit(duration_s: float, link_mbps: float, min_mbps: float, max_mbps: float,
                              period_s: float, icmp_mbps: float = 0.0, *,
                              c_s: float | None = None) -> float:
    """The capacity (megabits) to judge TCP against: eq. (8) whenever it is valid, i.e. when
    Max + I <= M, so the background never exceeds the link (all of the paper's runs: 80 + 1.09 < 100).

    Our choice beyond the paper: when Max + I > M the literal eq. (8) subtracts the overload as if
    TCP owed it back; we integrate max(0, M - I - f(t)) numerically instead, so T >= 0 and is 0
    when Min + I >= M.
    """
    _, link, icmp, _, _, _ = _check_capacity_args(duration_s, link_mbps, min_mbps, max_mbps,
                                                  period_s, icmp_mbps, c_s)
    if float(max_mbps) + icmp <= link:
        return capacity_closed_form_mbit(duration_s, link_mbps, min_mbps, max_mbps, period_s, icmp_mbps,
                                         c_s=c_s)
    return max(0.0, capacity_numeric_mbit(duration_s, link_mbps, min_mbps, max_mbps, period_s,
                                          icmp_mbps, clip=True, c_s=c_s))


def mbit_to_bytes(mbit: float) -> float:
    """Megabits (10^6 bit) to bytes."""
    return float(mbit) * MBIT / BITS_PER_BYTE


def theoretical_capacity_bytes(duration_s: float, link_mbps: float, min_mbps: float, max_mbps: float,
                               period_s: float, icmp_mbps: float = 0.0, *,
                               c_s: float | None = None) -> float:
    """`theoretical_capacity_mbit` in bytes (T Mb * 10^6 / 8); the paper's "T = ... MB" is this / 10^6."""
    return mbit_to_bytes(theoretical_capacity_mbit(duration_s, link_mbps, min_mbps, max_mbps,
                                                   period_s, icmp_mbps, c_s=c_s))


def effectiveness_pct(achieved_bytes: float, capacity_bytes: float) -> float:
    """Effectiveness, the "Achieved %" of Tables I-II: bytes TCP moved in [0, tau] as % of T (bytes).

    Not capped at 100: T subtracts the UDP rate *offered*, and UDP packets lost at the bottleneck
    free capacity that TCP may use. Both arguments in the same unit (bytes); the paper itself
    divided Iperf MBytes (apparently 2^20 B) by T in 10^6-byte MB (see seed002_reference), which
    understates its percentages by 4.9% relative; feeding its printed MB to this function
    reproduces its printed percentages.
    """
    got = _number("achieved_bytes", achieved_bytes)
    cap = _number("capacity_bytes", capacity_bytes, positive=True)
    return got / cap * 100.0


def loss_fraction(lost: int, sent: int) -> float:
    """p = lost / sent for a UDP stream (datagrams), a fraction in [0, 1]."""
    lost_n = _number("lost", lost)
    sent_n = _number("sent", sent, positive=True)
    if lost_n > sent_n:
        raise ValueError(f"lost ({lost_n:g}) cannot exceed sent ({sent_n:g})")
    return lost_n / sent_n


def sqrt_p(lost: int, sent: int) -> float:
    """sqrt(p) with p = lost / sent as a fraction: the factor in the Mathis bound, eq. (2)/(9)."""
    return math.sqrt(loss_fraction(lost, sent))


def paper_sqrt_p(lost: int, sent: int) -> float:
    """The "\\sqrt{p}" of Tables IV-V: sqrt of the loss rate in *percent* (= 10 * sqrt_p).

    The paper says "square root of the packet loss rate reported by Iperf", and Iperf reports loss
    in percent. As fractions its values are implausible: Table IV Parallel 9's 0.648 would be 42%
    loss while those 9 streams reached 87.95% of T, and Table V Base's 0.158 (p = 2.5%) put in the
    Mathis bound (MSS 1460 B, RTT 67.92 ms) allows 1.3 Mb/s against the 18.25 Mb/s measured;
    as percent (p = 0.025%) it allows 13 Mb/s. So we read the printed values as sqrt(percent).
    """
    return math.sqrt(100.0 * loss_fraction(lost, sent))


def paper_sqrt_p_from_percent(lost_percent: float) -> float:
    """The Tables IV-V "\\sqrt{p}" from a loss already in percent (Iperf's and drivers/paced_udp's
    `lost_percent`): sqrt(lost_percent)."""
    pct = _number("lost_percent", lost_percent)
    if pct > 100:
        raise ValueError(f"lost_percent must be <= 100, not {lost_percent!r}")
    return math.sqrt(pct)


def median_paper_sqrt_p(runs: Iterable[tuple[int, int]]) -> float:
    """Table V's statistic over repeated runs: sqrt of the median loss rate (percent), runs given as
    (lost, sent) pairs. (sqrt is monotone, so this differs from the median of per-run sqrt values
    only for an even number of runs, where the two middle runs are averaged before the sqrt.)"""
    rates = [100.0 * loss_fraction(lost, sent) for lost, sent in runs]
    if not rates:
        raise ValueError("no runs")
    return math.sqrt(float(np.median(rates)))


def mathis_bound_mbps(mss_bytes: float, rtt_ms: float, p: float, c: float = math.sqrt(1.5)) -> float:
    """Eq. (2)/(9), BW <= C * MSS / (RTT sqrt(p)), in Mb/s; p a fraction in (0, 1], RTT in ms.

    The paper uses it only qualitatively (a larger RTT or sqrt(p) lowers a stream's bandwidth) and
    gives no C; the default is Mathis et al.'s sqrt(3/2) for periodic loss without delayed ACKs.
    """
    mss = _number("mss_bytes", mss_bytes, positive=True)
    rtt = _number("rtt_ms", rtt_ms, positive=True)
    prob = _number("p", p, positive=True)
    if prob > 1:
        raise ValueError(f"p is a fraction in (0, 1], not {p!r} (percent? divide by 100)")
    return _number("c", c, positive=True) * mss * BITS_PER_BYTE / (rtt / 1000.0 * math.sqrt(prob)) / MBIT


def rtt_summary(samples_ms: Sequence[float | None]) -> dict:
    """Summary of one run's fping RTTs (ms; one ping every 10 ms in the paper), None/NaN = no reply.

    Returns {"sent", "received", "lost", "mean_ms", "median_ms", "p95_ms", "paper_ms"}. The paper's
    statistic (Tables IV-V, "median RTT") is the median, so paper_ms = median_ms. p95 uses linear
    interpolation (numpy's default). With no reply at all the statistics are None.
    """
    if isinstance(samples_ms, (str, bytes)):
        raise ValueError("samples_ms must be a sequence of RTTs in ms")  # noqa: TRY004 - as above
    samples = list(samples_ms)
    if not samples:
        raise ValueError("no RTT samples")
    got = []
    for s in samples:
        if s is None or (isinstance(s, float) and math.isnan(s)):
            continue
        got.append(_number("RTT sample", s))
    out = {"sent": len(samples), "received": len(got), "lost": len(samples) - len(got),
           "mean_ms": None, "median_ms": None, "p95_ms": None, "paper_ms": None}
    if got:
        arr = np.asarray(got)
        median = float(np.median(arr))
        out.update(mean_ms=float(arr.mean()), median_ms=median, p95_ms=float(np.percentile(arr, 95)),
                   paper_ms=median)
    return out


def median_rtt_over_runs(runs: Iterable[Sequence[float | None]]) -> float:
    """The RTT of a Table IV-V cell over repeated runs: median of the per-run median RTTs (ms).

    The paper only says "median RTT" of runs repeated every 30 minutes; we take the median within a
    run, then the median across runs (as Table V does for p), so that long runs do not outweigh
    short ones. Runs without any reply are skipped; ValueError if none is left.
    """
    medians = [s["median_ms"] for s in map(rtt_summary, runs) if s["median_ms"] is not None]
    if not medians:
        raise ValueError("no run with an RTT reply")
    return float(np.median(medians))
