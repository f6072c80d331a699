"""The console over a real HF Trainer run's log, in a real terminal, as a real torchrun run's lines
arrive one batch at a time: then it writes what Textual's own compositor draws of its screen from
scratch, how many of its frames scrolled the terminal, and its driver and input thread, to the
JSON file named by its argument; then it runs until q.

    python -m tests.snapshot_apps.scrolling_log OUT.json
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path

from textual._compositor import Compositor

from console.model import LogLine
from console.ui.render.cropped_screen import ScrollingChopsUpdate
from tests.real_captures import Capture
from tests.snapshot_apps.scenarios import make_app

#: Lines per batch, one batch every BATCH_S: mostly one, as a run's log grows, now and then several.
BATCHES = (1, 1, 1, 2, 1, 1, 3, 1, 1, 1, 5, 1, 1, 1, 1, 2, 1, 1, 1, 1)
BATCH_S = 0.05


def torchrun_lines(after: int) -> list[LogLine]:
    """The real torchrun watchdog run's lines (NCCL errors, tracebacks), numbered on from `after`."""
    return [dataclasses.replace(line, number=after + index) for index, line in enumerate(Capture("torchrun_watchdog").lines(), 1)]


async def main(out: Path) -> None:
    app = make_app("bar")
    lines = torchrun_lines(app.state.lines_received)
    running = asyncio.create_task(app.run_async())
    while not (app.is_running and app.screen.is_current and app.screen.size):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    scrolled = 0
    compositor = app.screen._compositor
    draw = compositor.render_update

    def render_update(*args, **kwargs):
        nonlocal scrolled
        update = draw(*args, **kwargs)
        scrolled += isinstance(update, ScrollingChopsUpdate)
        return update

    compositor.render_update = render_update
    for count in BATCHES:
        app.state.add_lines(lines[:count])
        del lines[:count]
        app.run_screen.mark_changed()
        await asyncio.sleep(BATCH_S)
    await asyncio.sleep(0.5)  # the last batch's frame reaches the terminal
    screen = app.screen
    textuals = Compositor()
    textuals.reflow(screen, screen.size)
    rows = ["".join(strip.text for strip in chops.values()) for chops in textuals._render_chops(screen.size.region, lambda y: True)]
    driver = app._driver
    key_thread = getattr(driver, "_key_thread", None)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "scrolled_frames": scrolled,
                "driver": type(driver).__name__,
                "pid": os.getpid(),
                "input_thread": key_thread.native_id if key_thread is not None else None,
            }
        )
    )
    await running  # until q, or the test ends the terminal


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
