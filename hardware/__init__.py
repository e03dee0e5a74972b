"""longhaul.hardware"""
