"""README.md says what is true: every relative link and image resolves, no editing fragment is
left in it, and the defaults it states are the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from console.cli import build_command_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: `[text](target)` and `![alt](target)`, not inside code spans or blocks.
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The README without its code blocks and code spans (a link written in code is an example)."""
    text = re.sub(r"^(    |\t).*$", "", text, flags=re.M)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def test_every_relative_link_and_image_resolves():
    targets = [t for t in LINK.findall(prose(README)) if not re.match(r"[a-z]+:|#", t)]
    assert targets, "no relative link found: the pattern is wrong"
    missing = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert missing == []


def test_no_editing_fragment_is_left():
    """An edit's leftovers (an HTML comment's end, a quote left open) are not the README's text."""
    assert "-->" not in README and "<!--" not in README
    assert not re.search(r'…"\)\.|\w" And in\s', README)


@pytest.mark.parametrize(("command", "stated"), [("journal", "6h"), ("report", "24h")])
def test_the_stated_since_defaults_are_the_codes(command: str, stated: str):
    assert build_command_parser(command).get_default("since") == stated
    assert f"pulse {command} CONFIG [--since {stated}]" in README
