"""A command in a real terminal: a tmux session of its own (its own server socket), read and typed
into as a user would, and ended with everything in it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup --test)")


class TmuxSession:
    def __init__(self, name: str, command: str, size: tuple[int, int]) -> None:
        self.tmux = ["tmux", "-L", name]
        self.size = size
        # COLUMNS and LINES (set where the tests run) would override the terminal's size for Textual.
        command = f"env -u COLUMNS -u LINES sh -c {shlex.quote(command)}"
        subprocess.run([*self.tmux, "new-session", "-d", "-s", "main", "-x", str(size[0]), "-y", str(size[1]), command], check=True)

    def __enter__(self) -> TmuxSession:
        return self

    def __exit__(self, *_) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)

    def screen(self, *options: str) -> list[str]:
        """The terminal's rows as tmux shows them, trailing blanks dropped; [] once the command has ended."""
        shown = subprocess.run([*self.tmux, "capture-pane", "-p", *options, "-t", "main"], capture_output=True, text=True)
        if shown.returncode != 0:
            return []
        rows = [row.rstrip() for row in shown.stdout.splitlines()]
        return rows + [""] * (self.size[1] - len(rows))

    def resize(self, size: tuple[int, int]) -> None:
        """The terminal resized to `size` (columns, rows), as a user drags its window: the command gets SIGWINCH."""
        subprocess.run([*self.tmux, "resize-window", "-t", "main", "-x", str(size[0]), "-y", str(size[1])], check=True)
        self.size = size

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "main", *keys], check=True)

    def running(self) -> bool:
        return subprocess.run([*self.tmux, "has-session", "-t", "main"], capture_output=True).returncode == 0

    def wait_for(self, shows: Callable[[list[str]], bool], seconds: float, what: str) -> list[str]:
        """The screen once `shows` holds of it, polled for up to `seconds`; fails naming `what` otherwise."""
        deadline = time.monotonic() + seconds
        while True:
            rows = self.screen()
            if shows(rows):
                return rows
            assert time.monotonic() < deadline, f"{what}; the terminal shows:\n" + "\n".join(rows)
            time.sleep(0.1)
