"""A terminal's screen as the escape sequences Textual writes leave it: the subset of VT100 a
frame uses (cursor position, scroll region, line feed, SGR), each cell its character and the SGR
in force when it was written. A sequence outside that subset fails the test: a frame must not
rely on what this screen does not model."""

from __future__ import annotations

import re

from rich.cells import cell_len

#: CSI sequences, and the characters written between them.
TOKEN = re.compile(r"\x1b\[([?\d;]*)([A-Za-z])|([^\x1b\n]+)|(\n)|(\x1b.?)")
BLANK = (" ", "")


class VtScreen:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.cells = [[BLANK] * width for _ in range(height)]
        self.x = self.y = 0
        self.top, self.bottom = 0, height - 1
        self.sgr = ""
        self.scrolls = 0
        """Rows scrolled by line feeds at the bottom margin."""

    def feed(self, sequence: str) -> None:
        for match in TOKEN.finditer(sequence):
            params, command, text, newline, other = match.groups()
            if command is not None:
                self._csi(params, command)
            elif text is not None:
                self._write(text)
            elif newline is not None:
                self._line_feed()
            else:
                raise AssertionError(f"an escape sequence this screen does not model: {other!r}")

    def _csi(self, params: str, command: str) -> None:
        if params.startswith("?"):
            if command in "hl":  # private modes (synchronized output, the cursor's visibility): nothing on screen
                return
            raise AssertionError(f"unmodelled private CSI {params}{command}")
        numbers = [int(p) if p else 0 for p in params.split(";")] if params else []
        if command == "m":
            self.sgr = "" if not numbers or numbers == [0] else f"{self.sgr};{params}" if self.sgr else params
        elif command == "H":
            row, column = (numbers + [1, 1])[:2]
            self.y, self.x = max(row, 1) - 1, max(column, 1) - 1
        elif command == "r":
            top, bottom = (numbers + [0, 0])[:2]
            self.top = (top or 1) - 1
            self.bottom = (bottom or self.height) - 1
            assert self.top < self.bottom, f"an empty scroll region {params!r}"
            self.x = self.y = 0  # DECSTBM homes the cursor
        else:
            raise AssertionError(f"unmodelled CSI {params}{command}")

    def _write(self, text: str) -> None:
        row = self.cells[self.y]
        for char in text:
            width = cell_len(char)
            assert self.x + width <= self.width, f"written past the right edge on row {self.y}: {text!r}"
            row[self.x] = (char, self.sgr)
            for extra in range(1, width):
                row[self.x + extra] = ("", self.sgr)
            self.x += width

    def _line_feed(self) -> None:
        if self.y == self.bottom:
            del self.cells[self.top]
            self.cells.insert(self.bottom, [BLANK] * self.width)
            self.scrolls += 1
        elif self.y < self.height - 1:
            self.y += 1

    def text(self) -> list[str]:
        return ["".join(char for char, _ in row) for row in self.cells]
