"""A py-spy dump, readable: identical stacks folded with a count, the run's own frames set apart.

`s` saves the dump as text to a timestamped file in the dumps folder (~/.local/state/pulse/dumps,
console/paths.py), `c` copies it to the clipboard (OSC 52, through the terminal).
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.observe.pyspy import ProcessDump, dump_lines
from console.paths import dumps_dir
from console.ui.dialogs.modal import FramedModal


#: How each kind of dump line is drawn: the run's own frames stand out, the library's recede.
_STYLES = {"process": "bold", "thread": "bold", "user": "bold", "library": "dim", "local": "dim"}


def dump_text(dump: ProcessDump) -> Text:
    """The dump as `pulse dump` prints it (console.observe.pyspy.dump_lines), styled."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for line in dump_lines(dump):
        text.append(line.text + "\n", _STYLES.get(line.kind, ""))
    text.rstrip()
    return text


def save_dump(dump: ProcessDump, directory: Path, *, now: float | None = None) -> Path:
    """Write the grouped dump as plain text to `pulse-dump-PID-YYYYmmdd-HHMMSS.txt` in `directory` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    path = directory / f"pulse-dump-{dump.pid}-{stamp}.txt"
    path.write_text(dump_text(dump).plain, encoding="utf-8")
    return path


class DumpScreen(FramedModal[None]):
    """One process's threads; s saves, c copies, Esc closes."""

    BINDINGS = [
        Binding("s", "save", "Save to file"),
        Binding("c", "copy", "Copy"),
        Binding("escape,q,p", "dismiss", "Close"),
    ]

    DEFAULT_CSS = """
    DumpScreen {
        & > .frame { width: 94%; height: 90%; }
    }
    """

    def __init__(self, dump: ProcessDump, *, save_dir: Path | None = None) -> None:
        super().__init__()
        self.dump = dump
        self.save_dir = save_dir or dumps_dir()

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="frame") as box:
            box.border_title = f"py-spy dump · pid {self.dump.pid}"
            box.border_subtitle = "s save · c copy · Esc close · > your code"
            yield Static(dump_text(self.dump))

    def action_save(self) -> None:
        try:
            path = save_dump(self.dump, self.save_dir)
        except OSError as exc:
            self.notify(f"could not save the dump: {exc.strerror} ({self.save_dir})", severity="error")
            return
        self.notify(f"saved {path}")

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(dump_text(self.dump).plain)
        self.notify("dump copied to the clipboard")
