"""Seed 003's discrete-event simulation (section 5.1) with the heuristic of Listing 1.

Online, one scheduling interval (1 s) at a time: a transfer is unknown until it arrives; at the
start of each interval every transfer that has arrived starts, and Listing 1 gives every running
transfer its rate for the interval:

    availBW_BE = netCap - requestLoad_OD  if requestLoad_OD < netCap_OD  else netCap_BE
    BE rate    = min(requestRate / requestLoad_BE x availBW_BE, requestRate)
    availBW_OD = netCap - requestLoad_BE  if requestLoad_BE < netCap_BE  else netCap_OD
    OD rate    = min(requestRate / requestLoad_OD x availBW_OD, requestRate)

A transfer finishes at the instant its bytes run out; the capacity it frees is handed out at the
next interval. Its simulated runtime runs from the interval start that first saw it (the wait
before it, under one interval, is the simulator's granularity: counted, every uncontended transfer
would be slower than itself); its reference is the trace runtime x the load ratio (the paper's
transfer-load ratio scales every transfer's size and duration, so its requested rate stays).
Bounded slowdown, equation (1): max(simulated, bound) / max(reference, bound), bound = interval.

The loop is C (plansim/plansim.c, built by the setup into build/lib); `_loop_py` below is the same
loop for a machine without the library, and the tests hold the two to each other.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from longhaul.collectors.studies.planning.trace import Trace
from longhaul.core.paths import BUILD_LIB

log = logging.getLogger(__name__)

LIB_NAME = "liblonghaul_plansim.so"
DEFAULT_INTERVAL_S = 1.0
_lib_cache: dict[str, object] = {}


@dataclass
class SimResult:
    od: np.ndarray            # bool per transfer, trace order
    arrival_s: np.ndarray     # the trace's start
    admit_s: np.ndarray       # the interval start that first saw it
    finish_s: np.ndarray
    runtime_s: np.ndarray     # finish - admit
    reference_s: np.ndarray   # trace runtime x load ratio
    slowdown: np.ndarray      # bounded slowdown, equation (1)
    nbytes: np.ndarray        # bytes moved (trace bytes x load ratio)
    delivered: np.ndarray     # bytes moved in each interval, from the origin
    interval_s: float
    capacity_bps: float
    od_share: float
    load_ratio: float


def bounded_slowdown(runtime_s: np.ndarray, reference_s: np.ndarray, bound_s: float) -> np.ndarray:
    return np.maximum(runtime_s, bound_s) / np.maximum(reference_s, bound_s)


def library_path() -> Path:
    env = os.environ.get("LONGHAUL_PLANSIM_LIB")
    return Path(env) if env else BUILD_LIB / LIB_NAME


def load_library():
    """The C loop's ctypes handle, or None (warned once) when it cannot be loaded."""
    path = str(library_path())
    if path not in _lib_cache:
        try:
            lib = ctypes.CDLL(path)
            dbl = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
            u8 = np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS")
            lib.lh_plan_sim.argtypes = [ctypes.c_long, dbl, dbl, dbl, u8, ctypes.c_double, ctypes.c_double,
                                        ctypes.c_double, ctypes.c_long, dbl, dbl, dbl]
            lib.lh_plan_sim.restype = ctypes.c_long
        except OSError as exc:
            log.warning("planning simulation library %s not loadable (%s); using the slower Python loop. "
                        "Build it with `make helpers`.", path, exc)
            lib = None
        _lib_cache[path] = lib
    return _lib_cache[path]


def simulate(trace: Trace, od: np.ndarray, capacity_bps: float, od_share: float, load_ratio: float = 1.0,
             interval_s: float = DEFAULT_INTERVAL_S, backend: str | None = None) -> SimResult:
    """Run Listing 1 over the trace. od: a bool per transfer (trace order); capacity_bps: netCap;
    od_share: netCap_OD / netCap in [0, 1]; backend: "c", "python" or None (C when it loads)."""
    start, seconds, nbytes = trace.arrays()
    od = np.ascontiguousarray(od, dtype=np.uint8)
    if len(od) != len(start):
        raise ValueError(f"{len(od)} classes for {len(start)} transfers")
    if not (0.0 <= od_share <= 1.0) or capacity_bps <= 0 or load_ratio <= 0 or interval_s <= 0:
        raise ValueError("od_share in [0, 1]; capacity, load ratio and interval > 0")
    rate = nbytes / seconds                       # bytes/s: the load ratio keeps it
    size = nbytes * load_ratio
    cap, cap_od = capacity_bps / 8, capacity_bps / 8 * od_share
    admit, finish, delivered = _run(start, size, rate, od, interval_s, cap, cap_od, backend)
    runtime = finish - admit
    reference = seconds * load_ratio
    return SimResult(od=od.astype(bool), arrival_s=start, admit_s=admit, finish_s=finish, runtime_s=runtime,
                     reference_s=reference, slowdown=bounded_slowdown(runtime, reference, interval_s),
                     nbytes=size, delivered=delivered, interval_s=interval_s, capacity_bps=capacity_bps,
                     od_share=od_share, load_ratio=load_ratio)


def _run(start, size, rate, od, dt, cap, cap_od, backend):
    n = len(start)
    lib = None if backend == "python" else load_library()
    if backend == "c" and lib is None:
        raise RuntimeError(f"the C simulation library {library_path()} is not built")
    # enough intervals for the last arrival plus all the bytes at the full capacity (Listing 1 is
    # work-conserving while demand exceeds capacity), doubled until it fits
    nsteps = int(math.ceil(((start[-1] if n else 0) + float(np.sum(size)) / cap + float(np.max(size / rate, initial=0))) / dt)) + 2
    while True:
        admit, finish, delivered = np.zeros(n), np.zeros(n), np.zeros(nsteps)
        if lib is not None:
            used = lib.lh_plan_sim(n, np.ascontiguousarray(start), np.ascontiguousarray(size),
                                   np.ascontiguousarray(rate), od, dt, cap, cap_od, nsteps, admit, finish, delivered)
        else:
            used = _loop_py(start, size, rate, od, dt, cap, cap_od, nsteps, admit, finish, delivered)
        if used == -2:
            raise MemoryError("planning simulation")
        if used >= 0:
            return admit, finish, delivered[:used]
        nsteps *= 2


def _loop_py(arrival, size, rate, od, dt, cap, cap_od, nsteps, admit, finish, delivered) -> int:
    """plansim.c's loop, line for line (same order of operations, so the same floating-point sums)."""
    n = len(arrival)
    rem = [float(x) for x in size]
    cap_be = cap - cap_od
    active: list[int] = []
    nxt = k = used = 0
    while nxt < n or active:
        if not active:
            k = max(k, math.ceil(arrival[nxt] / dt - 1e-9))
        if k >= nsteps:
            return -1
        t = k * dt
        while nxt < n and arrival[nxt] <= t + 1e-9:
            admit[nxt] = t
            active.append(nxt)
            nxt += 1
        req_od = req_be = 0.0
        for i in active:
            if od[i]:
                req_od += rate[i]
            else:
                req_be += rate[i]
        avail_be = cap - req_od if req_od < cap_od else cap_be
        avail_od = cap - req_be if req_be < cap_be else cap_od
        sent, kept = 0.0, []
        for i in active:
            req, avail = (req_od, avail_od) if od[i] else (req_be, avail_be)
            share = rate[i] / req * avail if req > 0 else 0.0
            r = max(min(share, rate[i]), 0.0)
            can = r * dt
            if r > 0 and rem[i] <= can:
                finish[i] = t + rem[i] / r
                sent += rem[i]
                rem[i] = 0.0
            else:
                sent += can
                rem[i] -= can
                kept.append(i)
        active = kept
        delivered[k] += sent
        k += 1
        used = k
    return used


def split_classes(n: int, od_fraction: float, seed: int) -> np.ndarray:
    """The paper's random OD/BE split: round(n x fraction) transfers OD, chosen by one seeded
    permutation, so a larger fraction's OD set contains a smaller one's (configurations compare
    the same transfers)."""
    rank = np.random.default_rng(seed).permutation(n)
    return rank < round(n * od_fraction)
