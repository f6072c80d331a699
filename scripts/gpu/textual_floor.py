#!/usr/bin/env python3
"""Textual at its least, the floor under the console's idle cost (scripts/gpu/idle's `textual_floor` row).

A stock Textual app that, once a second, rewrites ROWS rows of COLUMNS characters (what the console's
frame for one GPU sample changes: the GPU row and its bars, the run's process row, the throughput
figures and sparklines, a box title) and does nothing else: no SSH, no agent, no log, no state.
What it costs beside nvitop on the same box is what the product's framework costs before any of
Pulse's own work; the console's cost above it is Pulse's.
"""

from __future__ import annotations

import time

from textual.app import App, ComposeResult
from textual.widgets import Static

ROWS = 10
COLUMNS = 40
SHADES = " ▁▂▃▄▅▆▇█"


class FloorApp(App[None]):
    def compose(self) -> ComposeResult:
        self.rows = [Static("", markup=False) for _ in range(ROWS)]
        yield from self.rows
        yield Static("GPU 0 · a sample a second · nothing else", markup=False)

    def on_mount(self) -> None:
        self.set_interval(1.0, self.redraw)
        self.redraw()

    def redraw(self) -> None:
        second = int(time.time())
        for index, row in enumerate(self.rows):
            bar = "".join(SHADES[(second + index + column) % len(SHADES)] for column in range(COLUMNS - 12))
            row.update(f"{second % 100:3d} % {index:4d} {bar}", layout=False)


if __name__ == "__main__":
    FloorApp().run()
