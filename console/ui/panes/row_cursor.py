"""The keys that move a pane's row cursor, the same in the GPU pane and the process table."""

from __future__ import annotations

from textual.binding import Binding, BindingType

#: Past either end of any pane (the move is clamped to its rows).
FAR = 1_000_000

ROW_CURSOR_BINDINGS: list[BindingType] = [
    Binding("up", "move(-1)", "Up", show=False),
    Binding("down", "move(1)", "Down", show=False),
    Binding("pageup", "page(-1)", "Page up", show=False),
    Binding("pagedown", "page(1)", "Page down", show=False),
    Binding("home", f"move({-FAR})", "First", show=False),
    Binding("end", f"move({FAR})", "Last", show=False),
]
"""Each pane defines `action_move(delta)` and `action_page(direction)`."""
