"""Subcommands of `longhaul`: filled in by its own issue."""

from __future__ import annotations


def register(sub) -> None:
    """Add this module's subcommands to the `longhaul` argument parser."""
