"""The contract between the report and the studies that add a section to it.

A study (collectors/studies/*) gives the report an object with

    name              the section's name: its template namespace in the report's Jinja loader
                      (so two studies may both call their template "section.html.j2")
    template          the path of its Jinja template, kept beside the study's code
    applies(store)    whether this run has anything for the section; cheap, no figures
    context(store)    the template's variables as plain data: numbers already formatted as text,
                      rows as lists and dicts, plots as Figure

reports.render renders the template with autoescape on and StrictUndefined: every string in the
context is escaped, whatever a stored run put in it, and a name the template uses but the context
lacks is an error rather than an empty cell. The one exception to escaping is Figure.svg, which is
matplotlib's output; figure() below is the only place in the report that marks markup as safe.

This module must not import the studies: they import it (layering: studies above reports).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from markupsafe import Markup

from longhaul.collectors.store.reader import StoredRun


@runtime_checkable
class Section(Protocol):
    """A report section of a study; see the module docstring."""

    name: str
    template: Path

    def applies(self, store: StoredRun) -> bool: ...

    def context(self, store: StoredRun) -> dict: ...


@dataclass(frozen=True)
class Figure:
    """A plot with its caption. The caption is plain text and is escaped like any other string."""

    svg: Markup
    caption: str = ""


def figure(svg: str | None, caption: str = "") -> Figure | None:
    """Wrap an SVG drawn by matplotlib through reports.plots (None: nothing was drawn).

    Trusting the SVG is sound because matplotlib writes it from numbers and escapes the texts it
    draws (titles, legends, tick labels), so a name from a stored run cannot become markup in it.
    Never pass anything else here: this is the report's only Markup().
    """
    return None if svg is None else Figure(Markup(svg), caption)
