"""The report's Jinja environment, shared by report.html, a sweep's cell pages, the studies'
sections, stand-alone pages such as a facility plan, and the web console: reports/templates, each
section's own template folder, autoescape on, strict about undefined names."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import jinja2

from longhaul.reports.sections import Section

TEMPLATES = Path(__file__).parent / "templates"
STYLESHEET = TEMPLATES / "report.css"


def environment(sections: Sequence[Section] = ()) -> jinja2.Environment:
    """The report's Jinja environment: reports/templates, and each section's template folder under
    the section's name (a PrefixLoader), so studies' templates can share a file name and can import
    reports/templates/macros.html.j2."""
    folders: dict[str, jinja2.BaseLoader] = {}
    for s in sections:
        if not s.name or "/" in s.name or s.name in folders:
            raise ValueError(f"section name {s.name!r} must be unique and must not contain '/'")
        folders[s.name] = jinja2.FileSystemLoader(Path(s.template).parent)
    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(TEMPLATES), jinja2.PrefixLoader(folders)])
    return ReportEnvironment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                        trim_blocks=True, lstrip_blocks=True)


class ReportEnvironment(jinja2.Environment):
    """Contexts are plain dicts, so `row.values` must mean the key "values": Jinja's default looks
    up the attribute first and would print the bound dict method (values, items, clear, ...)."""

    def getattr(self, obj, attribute):
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)
