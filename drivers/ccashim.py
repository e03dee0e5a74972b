"""Give a tool without a congestion-control option the flow's CCA, per socket, via LD_PRELOAD
(drivers/ccashim/ccashim.c). iperf3 has -C; globus-url-copy and longhaul-nfswrite have none, and a
network namespace may only default to what the host allows (here reno and bbr, not cubic)."""

from __future__ import annotations

import os
from pathlib import Path

from longhaul.core.paths import BUILD_LIB

LIBRARY_NAME = "liblonghaul_ccashim.so"


def library_path() -> Path:
    """$LONGHAUL_CCASHIM or <repo>/build/lib."""
    env = os.environ.get("LONGHAUL_CCASHIM")
    if env:
        return Path(env)
    return BUILD_LIB / LIBRARY_NAME


def wrap(argv: list[str], cca: str | None, library: Path | None = None,
         max_pacing_bps: float | None = None, reuse_address: bool = False) -> list[str]:
    """argv run with every TCP socket it opens set to `cca`, paced at most at max_pacing_bps
    (bits/s), and with SO_REUSEADDR if reuse_address; unchanged when none is asked for."""
    settings = ([f"LONGHAUL_TCP_CCA={cca}"] if cca else []) + \
        ([f"LONGHAUL_MAX_PACING_RATE={max(1, round(max_pacing_bps / 8))}"] if max_pacing_bps else []) + \
        (["LONGHAUL_REUSEADDR=1"] if reuse_address else [])
    if not settings:
        return list(argv)
    return ["env", f"LD_PRELOAD={library or library_path()}", *settings, *argv]
