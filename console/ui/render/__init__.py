"""The only place Pulse reaches into Textual's internals, guarded by the versions it was tested with.

Textual's public API lacks what Pulse needs here: frames that draw only the lines they change
(cropped_screen.py overrides the compositor), an input thread that sleeps until there is input
and output that a hung-up terminal cannot block (input_driver.py), a scrollbar drawn from kept rows (kept_scrollbar.py), a longer log that moves
its scrollbar without a layout (`grow_virtual_size`), and the app's unhandled exception and
terminal (`app_exception`, `terminal_write`). A training venv's pins
may give any 8.x release, so at import the version is checked against `TESTED_TEXTUAL`: any other
(or PULSE_STOCK_TEXTUAL=1) gives stock Textual instead, a plain Screen and Textual's own driver,
and `STOCK_REASON` says why (the app says it once, `stock_notice`).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import textual
from textual import constants

if TYPE_CHECKING:
    from textual.app import App
    from textual.driver import Driver
    from textual.geometry import Size
    from textual.scroll_view import ScrollView

#: The Textual releases these overrides were tested with (requirements.lock pins the newest);
#: tests/test_render_guard.py holds the lock to this list.
TESTED_TEXTUAL = frozenset({"8.2.8"})


def stock_reason(version: str, environ: dict[str, str] | os._Environ[str]) -> str | None:
    """Why the console runs on stock Textual (None: the guarded overrides are on)."""
    if environ.get("PULSE_STOCK_TEXTUAL") == "1":
        return "PULSE_STOCK_TEXTUAL=1"
    if version not in TESTED_TEXTUAL:
        return f"Textual {version} is not one Pulse was tested with ({', '.join(sorted(TESTED_TEXTUAL))})"
    return None


def textual_version() -> str:
    """The installed Textual's version, as `textual.__version__` says it, read from the name of the
    one `textual-VERSION.dist-info` folder beside the package where there is one: that attribute
    imports importlib.metadata (its email and zip modules: 9 ms of every start on the 2-core box) to find the same."""
    site = os.path.dirname(os.path.dirname(textual.__file__ or ""))
    try:
        names = [entry.name for entry in os.scandir(site) if entry.name.startswith("textual-") and entry.name.endswith(".dist-info")]
    except OSError:
        names = []
    if len(names) == 1:
        return names[0].removeprefix("textual-").removesuffix(".dist-info")
    return textual.__version__  # an egg, a zip, two installs side by side: importlib.metadata decides


STOCK_REASON = stock_reason(textual_version(), os.environ)
GUARDED = STOCK_REASON is None

if GUARDED:
    from console.ui.render.cropped_screen import CroppedScreen as BaseScreen
    from console.ui.render.cropped_screen import ScrolledLines
    from console.ui.render.kept_scrollbar import KeptScrollBars
else:
    from textual.screen import Screen as BaseScreen  # type: ignore[assignment]  # the one base, chosen at import

    class ScrolledLines:  # type: ignore[no-redef]  # stock Textual: a marker without a compositor to read it
        """Stock Textual: nothing scrolls the terminal, the widget is drawn as Textual draws it."""

    class KeptScrollBars:  # type: ignore[no-redef]  # stock Textual: its own scrollbars
        """Stock Textual: the scroll view keeps Textual's own scrollbars."""


__all__ = ["BaseScreen", "GUARDED", "STOCK_REASON", "KeptScrollBars", "ScrolledLines"]


def stock_notice() -> str | None:
    """The one line an app says at start when it runs on stock Textual."""
    return None if GUARDED else f"stock Textual: {STOCK_REASON}; frames are drawn whole"


def driver_class(app: App[Any]) -> type[Driver] | None:
    """The quiet Linux driver (input_driver.py), or None: Textual's own choice."""
    if not GUARDED or sys.platform == "win32" or constants.DRIVER is not None:
        return None  # stock Textual, Windows' driver, or the one TEXTUAL_DRIVER names
    from console.ui.render.input_driver import QuietLinuxDriver  # Textual's LinuxDriver, made quieter

    return QuietLinuxDriver


def terminal_write(app: App[Any], text: str) -> None:
    """Write escape sequences (alert notifications) to the terminal, as App.bell does; stock
    Textual has no public way, and they are dropped."""
    driver = app._driver if GUARDED else None
    if not app.is_headless and driver is not None:
        driver.write(text)


def app_exception(app: App[Any]) -> BaseException | None:
    """The exception that ended `app` (Textual keeps it, prints it and returns as if quit); None
    on stock Textual, where the exit code alone says it crashed."""
    return app._exception if GUARDED else None


def grow_virtual_size(view: ScrollView, size: Size) -> None:
    """Give `view` a new virtual size. Setting `virtual_size` lays out the whole screen (every pane
    re-rendered), for each batch of a log's lines; a longer log only moves the scrollbar, so the
    scrollbars alone are updated (appearing or going, show_vertical_scrollbar asks for a layout itself)."""
    if not GUARDED:
        view.virtual_size = size
        return
    view.set_reactive(type(view).virtual_size, size)
    view._scroll_update(size)
