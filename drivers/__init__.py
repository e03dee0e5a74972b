"""longhaul.drivers"""
