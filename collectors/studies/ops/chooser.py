"""OPS's decision before each foreground transfer (seed 000 6.7): classify the probe window that
precedes the burst, map the class to a congestion control. A fixed scheme transfers with its own
CCA whatever the window says, and still logs what OPS would have chosen.

The trial calls a chooser with the burst (its planned start, start_s) and the RTT probe's rounds
so far (t_s on the trial's clock, rtt_ms or None for a lost round)."""

from __future__ import annotations

import numpy as np

from longhaul.collectors.studies.ops.decision import Decision
from longhaul.collectors.studies.ops.model import Model, classify


class OpsChooser:
    def __init__(self, model: Model | None, decision: Decision | None, w: int, fixed: str | None,
                 fallback: str = "cubic"):
        if fixed is None and (model is None or decision is None):
            raise ValueError("the adaptive scheme needs a model and a decision mapping")
        self.model, self.decision, self.w, self.fixed, self.fallback = model, decision, w, fixed, fallback

    def window(self, start_s: float, rounds) -> list[float]:
        """The first w rounds of the w + 1 s before the burst (the phases the model's windows had;
        one more second covers a round that began late). Lost rounds are skipped."""
        rtts = [r.rtt_ms for r in sorted(rounds, key=lambda r: r.t_s)
                if start_s - (self.w + 1) - 0.25 <= r.t_s < start_s and r.rtt_ms is not None]
        return rtts[:self.w]

    def __call__(self, burst, rounds) -> tuple[str, dict]:
        rtts = self.window(burst.start_s, rounds)
        label = chosen = None
        if self.model is not None and len(rtts) >= self.w:
            label = classify(self.model, rtts)
            chosen = self.decision.decide(label)
        cca = self.fixed or chosen or self.fallback
        note = {"class": label, "ops_cca": chosen, "rounds": len(rtts),
                "probe_ms": round(float(np.mean(rtts)), 1) if rtts else None}
        return cca, note
