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

# The same statements as marks on our accuracy-against-w plots: passive 1-NN between 80 and 85 %
# (§6.6: "80% for w = 10 and 85% for w = 40"), active 1-NN 96 % at w = 50 (§8, Figure 25a).
PAPER_ACCURACY = {
    "passive": {"range": (80.0, 85.0), "label": "paper (text):\n1-NN 80-85 %"},
    "active": {"range": (96.0, 96.0), "w": 50, "label": "paper (text): 1-NN\n96 % at w = 50"},
}

# §6.6 on Figures 27-28 (the matrices are images): what active probing resolved and what it left.
PAPER_CONFUSION = ("The paper's matrices are images; its text says active probing resolved B1-C1 against B1-B1 "
                   "(cubic_bbr against bbr2) and left only the number of streams of one protocol confused "
                   "(cubic against cubic2, bbr against bbr2).")
