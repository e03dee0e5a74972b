"""Seed 001's transition RTTs where its text gives them (section 2.3, on Figure 10): CUBIC over
10GigE per buffer size and stream count, in ms. For H-TCP and Scalable TCP the text says only
"similar increasing trends"; for 2 streams with the normal and large buffers it gives no value."""

from __future__ import annotations

PAPER_TAU_T: dict[tuple[str, str], dict[int, float]] = {
    # "from 0.4 ms for 1-3 parallel streams to 11.8 ms for 4 or more"
    ("cubic", "default"): {**{n: 0.4 for n in (1, 2, 3)}, **{n: 11.8 for n in range(4, 11)}},
    # "consistently higher (at 45.6 ms, except for 2 streams) ... 91.6 ms for 10 parallel streams"
    ("cubic", "normal"): {**{n: 45.6 for n in (1, *range(3, 10))}, 10: 91.6},
    # "91.6 ms for 1-6 parallel streams (except 2 streams) and 183 ms for 7 or more"
    ("cubic", "large"): {**{n: 91.6 for n in (1, 3, 4, 5, 6)}, **{n: 183.0 for n in range(7, 11)}},
}


def paper_tau_t(cca: str, buffer: str, streams: int) -> float | None:
    return PAPER_TAU_T.get((cca, buffer), {}).get(streams)
