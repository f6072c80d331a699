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

from console.observe.pyspy import ProcessDump, classify_wait, frame_text, group_identical, is_user_frame
from console.paths import dumps_dir
from console.ui.modal import FramedModal


def dump_text(dump: ProcessDump) -> Text:
    """The dump grouped and styled: one block per distinct stack, innermost frame first."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"Process {dump.pid}: ", "bold")
    text.append(f"{dump.command}\n")
    if dump.python_version:
        text.append(f"Python {dump.python_version}\n", "dim")
    groups = group_identical(dump.threads)
    text.append(f"{len(dump.threads)} threads, {len(groups)} distinct stacks\n")
    for count, thread in groups:
        text.append("\n")
        name = thread.name or "(unnamed)"
        text.append(f"×{count} " if count > 1 else "   ", "bold reverse" if count > 1 else "")
        text.append(f"{name}", "bold")
        text.append(f"  tid {thread.thread_id}  ", "dim")
        wait = classify_wait(thread)
        text.append(wait, "bold" if wait not in ("running", "unknown") else "dim")
        if thread.owns_gil:
            text.append("  holds the GIL", "bold")
        text.append("\n")
        for frame in thread.frames:
            if is_user_frame(frame):
                text.append("  ▶ ", "bold")
                text.append(frame_text(frame, full_path=True) + "\n", "bold")
            else:
                text.append("    " + frame_text(frame, full_path=True) + "\n", "dim")
            for variable in frame.locals:
                text.append(f"        {variable.name} = {variable.repr}\n", "dim")
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
            box.border_subtitle = "s save · c copy · Esc close · ▶ your code"
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
