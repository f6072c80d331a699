"""The log's live progress line: the bar a framework redraws in place, shown at the foot of the log
pane, or why the log shows no progress at all (a progress display that draws only on a terminal)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from console.units import format_duration
from console.ui.run_figures import ProgressBarView


#: Past this age a redraw is marked with it: a bar that stopped redrawing is not live.
SHOW_AGE_AFTER_S = 5.0


class ProgressBarLine(Static):
    """One row under the log pane; hidden while there is nothing to show."""

    DEFAULT_CSS = """
    ProgressBarLine {
        height: 1;
        display: none;
        background: $panel;
        padding: 0 1;
        &.-shown { display: block; }
        &.-terminal-only { color: $warning; }
    }
    """

    def show(self, view: ProgressBarView) -> None:
        if view.text is not None:
            line = Text.assemble(("▸ ", "bold"), view.text.strip())  # log text: never parsed as markup
            if view.written_ago_s is not None and view.written_ago_s >= SHOW_AGE_AFTER_S:
                line.append(f"  (drawn {format_duration(view.written_ago_s)} ago)", "bold")
        elif view.terminal_only is not None:
            line = Text(f"no progress in the log: {view.terminal_only}")
        else:
            line = Text()
        self.set_class(view.text is not None or view.terminal_only is not None, "-shown")
        self.set_class(view.text is None and view.terminal_only is not None, "-terminal-only")
        if line != self.content:
            self.update(line, layout=False)  # one row, always: a redraw never changes its size
