"""Seed 003's numbers, for the report's "paper" column. Its traces are not public: these are the
trends it states (sections 5.4, 5.5, 6.3), each with the condition it holds under."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    key: str
    text: str          # the paper's statement
    where: str         # section / figure


# the conditions under which our plan's numbers are set beside each claim (sweep.py: headline_rows)
CLAIMS = (
    Claim("baseline_2x_avg", "all best-effort at 2x load: average slowdown under 1.5x", "abstract, 5.4"),
    Claim("baseline_2x_gap", "at 2x load the peak-mean gap shrinks by 24, 10, 22 and 16 % (18 % on average); "
          "16 % on the testbed", "5.4, 6.3"),
    Claim("od50_2x", "50 % OD transfers at 2x load, OD bandwidth 60-70 %: OD slowdown near 1, BE under 2x", "5.4"),
    Claim("max_bw_over", "OD bandwidth 10-20 points above its share: max OD slowdown under 5, max BE under 18",
          "5.4, Figures 7-8"),
    Claim("baseline_2x_max", "all best-effort at 2x load: maximum slowdown under 12", "5.4, Figures 7-8"),
    Claim("testbed_30_40", "testbed, 30 % OD with 40 % of the link, 2x load: OD 1.06 (half the baseline's), "
          "BE 1.17", "6.3, Figure 10"),
    Claim("cov", "1-minute CoV of concurrency and throughput: 0.67 and 0.69 (trace 3), 0.87 and 1.07 (trace 4)",
          "5.5"),
)

# Figure 2 / section 5.2: the paper's four traces
TRACE_MEAN_TO_PEAK = {"trace 1": 0.24, "trace 2": 0.10, "trace 3": 0.22, "trace 4": 0.16}
GAP_SHRINK_2X_PCT = {"trace 1": 24, "trace 2": 10, "trace 3": 22, "trace 4": 16, "testbed": 16}
