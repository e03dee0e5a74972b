"""Report section: filled in by its own issue; returns None while a run has nothing for it."""

from __future__ import annotations


def section(store) -> str | None:
    return None
