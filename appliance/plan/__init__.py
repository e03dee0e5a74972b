"""Seed 003's lab replay: a (compressed) facility trace run through the lab of the config's
backend, each transfer a real flow, with section 7's BE cap applied at run time (replay.py)."""
