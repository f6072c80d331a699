"""The frame every Pulse modal shares: one bordered box in the middle, over the dimmed console."""

from __future__ import annotations

from typing import TypeVar

from textual.screen import ModalScreen

ResultType = TypeVar("ResultType")


class FramedModal(ModalScreen[ResultType]):
    """A modal whose content is one container with the class `frame`; subclasses set its size."""

    DEFAULT_CSS = """
    FramedModal {
        align: center middle;
        background: $background 50%;
        & > .frame {
            border: round $primary;
            border-title-color: $primary;
            border-title-style: bold;
            border-subtitle-color: $text-muted;
            background: $surface;
            padding: 0 1;
        }
    }
    """
