"""README's table of keys says what the help screen says: the same keys, the same words, nothing more or less."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from console.ui.dialogs.help_screen import help_table
from console.ui.keymap import ACTIONS, GROUPS

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_keys() -> set[tuple[str, str]]:
    """(keys, text) of each row of the table under README's `### Keys`."""
    section = README.read_text().split("### Keys", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    pairs = set()
    for row in rows:
        keys, text = (cell.strip() for cell in row.strip("|").split(" | ", 1))
        pairs.add((" ".join(re.findall(r"`([^`]+)`", keys)), text))
    return pairs


def help_screen_keys() -> set[tuple[str, str]]:
    """(keys, text) of each line the help screen shows for the whole action table."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(help_table(ACTIONS, read_only=False))
    pairs = set()
    for line in console.export_text().splitlines():
        keys, _, text = line.strip().partition("  ")
        if text.strip() and keys not in GROUPS:
            pairs.add((keys, text.strip()))
    return pairs


def test_readme_key_table_matches_the_help_screen():
    shown = help_screen_keys()
    assert len(shown) == len(ACTIONS)
    assert readme_keys() == shown, "README.md's ### Keys table differs from the help screen (the help screen is the source: copy its rows into the README)"
