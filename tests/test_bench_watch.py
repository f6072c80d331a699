"""The bench times a log line from its write to the frame that draws it (scripts/benchlib/apps.py
`watch_screen`): every line drawn must be seen drawn, whichever way the frame draws the pane."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from benchlib.apps import watch_screen  # noqa: E402
from console.ui.panes.log_pane import LogPane  # noqa: E402
from tests.snapshot_apps.scenarios import make_app  # noqa: E402
from tests.snapshot_apps.scrolling_log import torchrun_lines  # noqa: E402
from tests.test_terminal_scroll import SIZE, add  # noqa: E402


async def test_each_line_is_seen_drawn_in_a_scrolled_frame_a_whole_one_and_a_styled_pane():
    app = make_app("bar")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        drawn = watch_screen(app)
        lines = torchrun_lines(app.state.lines_received)
        await add(app, pilot, lines[:1])  # the pane written whole
        await add(app, pilot, lines[1:3])  # scrolled
        app.query_one(LogPane).styles.tint = "red 10%"  # a tinted pane's lines are styled by Textual itself
        await pilot.pause()
        await add(app, pilot, lines[3:4])
        assert {line.number for line in lines[:4]} <= drawn.keys()
