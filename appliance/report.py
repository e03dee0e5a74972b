"""The run report with every study's section: what the CLI calls to write or render a report.

reports.render builds the report but may not import the studies (they sit above it); this is the
one place that puts the two together.
"""
from __future__ import annotations

from pathlib import Path

from longhaul.collectors.studies import registry
from longhaul.reports import render


def write_report(run_dir: Path, formats: tuple[str, ...] = render.FORMATS) -> list[Path]:
    """Write report.html and/or report.pdf into run_dir; return the paths written."""
    return render.write_report(run_dir, formats, sections=registry.SECTIONS)

