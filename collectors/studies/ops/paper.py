"""Seed 000's numbers the OPS study stands beside ours, and the names both sides use: the three
Figure 29 schemes (the plans run them, the section orders them) and what the paper's text gives."""

from __future__ import annotations

SCHEMES = ("Fixed:CUBIC", "Fixed:BBR", "Adaptive")

# Seed 000 section 6.7: the Jain indices the text gives; the bar heights are only in the image.
PAPER_FIG29 = {
    ("cubic", "Fixed:CUBIC"): {"fg_mbps": None, "bg_mbps": None, "jain": None},
    ("cubic", "Fixed:BBR"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.62},
    ("cubic", "Adaptive"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.99},
    ("bbr", "Fixed:CUBIC"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.60},
    ("bbr", "Fixed:BBR"): {"fg_mbps": None, "bg_mbps": None, "jain": None},
    ("bbr", "Adaptive"): {"fg_mbps": None, "bg_mbps": None, "jain": 0.96},
}

# Seed 000's text on recognition: §7 "up to 85% accuracy" passive (Figure 23), "up to 0.96" active
# (Figure 25a, 1-NN at w = 50), and active above passive "by between 7% (for w = 5) to 16% (for
# w = 50)" (Figure 24a).
PAPER_BEST = {"passive": "up to 85 (1-NN)", "active": "up to 96 (1-NN, w = 50)"}
PAPER_GAP = {5: "+7", 50: "+16"}
