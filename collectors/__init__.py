"""longhaul.collectors"""
