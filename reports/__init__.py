"""longhaul.reports"""
