"""Textual's internals only in console/ui/render/, and only on a Textual the overrides were tested with."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import textual

from console.ui import render
from console.ui.render import TESTED_TEXTUAL, stock_reason

REPO = Path(__file__).resolve().parent.parent
TEXTUAL = Path(textual.__file__).parent


def test_the_locks_pin_a_tested_textual():
    for lock in ("requirements.lock", "requirements-test.lock"):
        pinned = re.search(r"^textual==(\S+)", (REPO / lock).read_text(), re.MULTILINE)
        assert pinned is not None and pinned.group(1) in TESTED_TEXTUAL, lock


def test_an_untested_textual_or_the_variable_gives_stock_textual():
    tested = sorted(TESTED_TEXTUAL)[0]
    assert stock_reason(tested, {}) is None
    assert stock_reason(tested, {"PULSE_STOCK_TEXTUAL": "1"}) == "PULSE_STOCK_TEXTUAL=1"
    assert "Textual 8.9.0 is not one Pulse was tested with" in str(stock_reason("8.9.0", {}))
    assert render.GUARDED == (os.environ.get("PULSE_STOCK_TEXTUAL") != "1" and textual.__version__ in TESTED_TEXTUAL)


def textual_private_names() -> set[str]:
    """The `_names` Textual's own modules define or set on their objects."""
    names: set[str] = set()
    for path in TEXTUAL.rglob("*.py"):
        names.update(re.findall(r"(?:def |self\.|cls\.)(_[a-z]\w*)", path.read_text(encoding="utf-8")))
    return names


def test_textual_internals_are_reached_only_in_render():
    """A `._name` of Textual's, or an import of a private Textual module, outside console/ui/render/,
    unless Pulse defines that name itself (its own widgets' `self._cache`)."""
    sources = {path: path.read_text(encoding="utf-8") for path in (REPO / "console").rglob("*.py")}
    ours: set[str] = set()
    for path, text in sources.items():
        if "render" not in path.relative_to(REPO).parts:
            ours.update(re.findall(r"(?:def |self\.(?=\w+\s*[:=][^=])|cls\.)(_[a-z]\w*)", text))
    private = textual_private_names() - ours
    found = []
    for path, text in sources.items():
        if path.is_relative_to(REPO / "console/ui/render"):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            names = {name for base, name in re.findall(r"(\w+)\.(_[a-z]\w*)\b", line) if name in private and base not in ("os", "sys")}
            if names or re.search(r"\btextual\._", line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []


STOCK_RUN = """
import asyncio
from textual.screen import Screen
from console.ui import render
from console.ui.app import PulseApp
from console.ui.panes.log_pane import LogPane
from tests.snapshot_apps.scenarios import make_app

said = []
app = make_app("oom")
app.notify = lambda message, **kwargs: said.append(message)  # the app's public hook

async def main():
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not render.GUARDED
        assert type(app.screen).__mro__[1] is Screen, type(app.screen).__mro__
        assert app.get_driver_class().__name__ != "QuietLinuxDriver"
        pane = app.query_one(LogPane)
        assert pane.line_count > 0 and pane.following
        await pilot.press("slash", *"oom", "enter")
        assert pane.search_text == "oom" and "search “oom”" in str(app.run_screen.log_box.border_subtitle)
        await pilot.press("escape", "l")
        assert pane.search_text == "" and not app.run_screen.search_input.has_class("-visible")
        assert str(app.run_screen.gpus_box.border_title) == "GPUs" and app.run_screen.gpus_box.border_subtitle

asyncio.run(main())
assert said.count("stock Textual: PULSE_STOCK_TEXTUAL=1; frames are drawn whole") == 1, said
print("stock ok")
"""


def test_the_console_runs_on_stock_textual():
    """The guard forced off: a plain Screen and Textual's own driver, said once; the run's screen works."""
    env = {**os.environ, "PULSE_STOCK_TEXTUAL": "1"}
    done = subprocess.run([sys.executable, "-c", STOCK_RUN], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stock ok" in done.stdout
