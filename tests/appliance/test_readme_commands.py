"""Every command in README's command-line table exists, with every flag the table shows for it:
read from the CLI's own parser, so a renamed or dropped flag fails here before a reader meets it."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from longhaul.appliance.cli.app import _parser

README = Path(__file__).resolve().parents[2] / "README.md"


def table_commands() -> list[str]:
    """The first cell of each row of the table under '## The command line': `longhaul ...`."""
    text = README.read_text()
    section = text[text.index("## The command line"):]
    section = section[:section.index("\n## ", 3)]
    return [m.group(1).replace("\\|", "|") for m in re.finditer(r"^\| `(longhaul [^`]+)` \|", section, re.M)]


def subparser(words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser of the longest run of subcommand words, and the words after it."""
    parser = _parser()
    for k, word in enumerate(words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            return parser, words[k:]
        parser = subs[0].choices[word]
    return parser, []


def test_the_table_lists_the_commands():
    commands = table_commands()
    assert len(commands) >= 15 and any(c.startswith("longhaul serve") for c in commands)


@pytest.mark.parametrize("command", table_commands())
def test_each_command_in_the_readme_exists_with_the_flags_it_shows(command):
    words = command.split()[1:]
    parser, rest = subparser(words)
    assert len(rest) < len(words), f"{command}: no such command"
    known = {s for a in parser._actions for s in a.option_strings}
    shown = set(re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", command))
    assert shown <= known, (command, sorted(shown - known))
