"""Seed 002's published numbers as data, so reports can show the paper's values beside ours.

Source: Hacker, Noble, Athey, "Improving Throughput and Maintaining Fairness using Parallel TCP"
(/work/shared/seeds/002_2941dee404ae5661.txt). Table titles, column headers and row names are kept
exactly as printed there (including the paper's "MB/SEC" in the titles, which means Mb/s, and the
row "Base" that Table V uses where the other tables say "Baseline 1"). Values are the printed
numbers; a percentage column holds 65.8 for "65.8%".

Units as the paper prints them: "Throughput Mb/sec" is 10^6 bit/s; "Measured MB" and T are in
megabytes. T = eq. (8) in megabits / 8 (10^6-byte MB: see collectors/studies/stiff_udp/analysis.py). The Measured MB
look like Iperf MBytes (2^20 bytes): 64.5 Mb/s * 240 s = 1845 MiB vs 1843.2 printed, but 1935 MB
if 10^6 bytes. The paper divides them by T as printed anyway, and so does `achieved_pct` below
when it reproduces the "Achieved %" column.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    """One printed table: `rows` are tuples in `columns` order, first column the row name."""

    number: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]

    def row_names(self) -> tuple[str, ...]:
        return tuple(r[0] for r in self.rows)

    def row(self, name: str) -> dict:
        """The row called `name` (as printed) as {column: value}; KeyError if there is none."""
        for r in self.rows:
            if r[0] == name:
                return dict(zip(self.columns, r))
        raise KeyError(f"{self.number} has no row {name!r}; rows: {self.row_names()}")

    def value(self, row: str, column: str):
        return self.row(row)[column]


TABLE_I = Table(
    "TABLE I",
    "TCP EFFECTIVENESS FOR UDP STREAM $\\in [1,10]$ MB/SEC AND THEORETICAL CAPACITY $T = 2801.5$ MB",
    ("TCP Method", "Throughput Mb/sec", "Measured MB", "Achieved %"),
    (
        ("Baseline 1", 64.5, 1843.2, 65.8),
        ("Combined 5", 83.54, 2402.5, 85.75),
        ("Combined 9", 84.46, 2441.6, 87.15),
        ("Parallel 5", 84.5, 2430, 86.74),
        ("Parallel 9", 86.63, 2464, 87.95),
    ),
)

TABLE_II = Table(
    "TABLE II",
    "TCP EFFECTIVENESS FOR UDP STREAM $\\in [50,80]$ MB/SEC AND THEORETICAL CAPACITY $T = 1014.6$ MB",
    ("TCP Method", "Throughput Mb/sec", "Measured MB", "Achieved %"),
    (
        ("Baseline 1", 18.25, 524, 51.65),
        ("Combined 5", 20.6, 601.8, 59.31),
        ("Combined 9", 27.3, 798, 78.65),
        ("Parallel 5", 27.6, 800, 78.85),
        ("Parallel 9", 30.2, 876.6, 86.4),
    ),
)

TABLE_III = Table(
    "TABLE III",
    "TCP EFFECTIVENESS FOR 5 CROSS TCP STREAMS",
    ("TCP Method", "Throughput Mb/sec", "Measured MB"),
    (
        ("Baseline 1", 15.65, 450.5),
        ("Combined 5", 20.27, 590.3),
        ("Combined 9", 29.84, 868.6),
        ("Parallel 5", 45.96, 1328.5),
        ("Parallel 9", 61.33, 1779),
    ),
)

# "RTT (msec)" is the median fping RTT; "\sqrt{p}" is printed as LaTeX in the source and is the
# square root of the UDP loss rate taken in percent (see collectors/stiff_udp.paper_sqrt_p).
TABLE_IV = Table(
    "TABLE IV",
    "FAIRNESS FOR UDP STREAM $\\in [1,10]$ MB/SEC",
    ("TCP Method", "RTT (msec)", "\\sqrt{p}"),
    (
        ("Baseline 1", 68.65, 0.261),
        ("Combined 5", 87.14, 0.332),
        ("Combined 9", 100.51, 0.332),
        ("Parallel 5", 73.01, 0.436),
        ("Parallel 9", 74.94, 0.648),
    ),
)

TABLE_V = Table(
    "TABLE V",
    "FAIRNESS FOR UDP STREAM $\\in [50,80]$ MB/SEC",
    ("TCP Method", "RTT (msec)", "\\sqrt{p}"),
    (
        ("Base", 67.92, 0.158),
        ("Combined 5", 68.06, 0.200),
        ("Combined 9", 79.42, 0.298),
        ("Parallel 5", 69.57, 0.313),
        ("Parallel 9", 120.27, 0.424),
    ),
)

TABLES = {t.number: t for t in (TABLE_I, TABLE_II, TABLE_III, TABLE_IV, TABLE_V)}

# The "T = ..." of the Table I and II titles, in MB (megabits of eq. (8) / 8).
THEORETICAL_CAPACITY_MB = {"TABLE I": 2801.5, "TABLE II": 1014.6}

# --- Experiment parameters stated in the text (sections VI.A, VI.C, VII.A) ---
LINK_MBPS = 100.0            # "The M value used in Equation 8 for these experiments was 100 Mb/sec."
DURATION_S = 240.0           # "4 minute TCP transfers"; "a period of 240 seconds"
PERIOD_S = 10.0              # "We selected a time period of 10 seconds"
UDP_RANGES_MBPS = {"UDP:1-10": (1.0, 10.0), "UDP:50-80": (50.0, 80.0)}   # (Min, Max), Figure 3 names
ICMP_PACKET_BYTES = 1440     # "a 1440 byte packet sent every 10 msec ... using fping"
ICMP_INTERVAL_S = 0.010
COMPETING_STREAMS = 5        # "5 competing single unmodified TCP streams"
FRACTIONAL_MULTIPLIER = 10   # virtual RTT multiplier used for all experiments but one
SOCKET_BUFFER_BYTES = 4 * 2**20   # "set to 4 MB" (the unit is not given; 2^20 assumed)

# Ours, not printed: the ICMP load I of eq. (4) that reproduces both printed T values. The paper
# does not print I; 1440 B / 10 ms would be 1.152 Mb/s and gives T = 2799.6 and 1012.8 MB, but
# every I in [1.0888, 1.0914] Mb/s gives 2801.5 and 1014.6 after rounding (tests/studies/test_stiff_udp.py).
IMPLIED_ICMP_MBPS = 1.09

# --- Section VII.C-D numbers given in the text (Figure 4 itself has no printed values) ---
BASELINE_COMPETING_AGGREGATE_MBPS = 75.3   # median aggregate of the 5 streams vs "Baseline 1"
APPROPRIATION_PCT = {
    "Combined 5": 6.2,
    "Combined 9": 17.5,
    "Parallel 5": 38.7,
    "Parallel 9": 58.0,
    "Combined 9 (multiplier 100)": 2.9,
}
# Section VII.D: multiplier 100 vs 10, effectiveness in the 5-cross test (Mb/s).
MULTIPLIER_100_MBPS = {"Combined 9 (multiplier 100)": 18.5, "Combined 9": 29.8, "Baseline 1": 15.65}


def achieved_pct(table: Table, row: str) -> float:
    """The paper's own computation of "Achieved %": Measured MB / T (title) * 100, unrounded."""
    return table.value(row, "Measured MB") / THEORETICAL_CAPACITY_MB[table.number] * 100.0
