"""Theme files turned into Textual themes: TOML shipped in the package (the repository's themes/)
and the operator's own in ~/.config/pulse/themes/.

A theme file has three tables: `[colors]` (Textual's base colours), `[lines]` (one colour
per kind of log line, exposed to CSS as `$line-oom`, `$line-nan`, ...) and `[thresholds]`
(where a gauge turns warning or critical). Files are validated when the console starts;
a bad one stops it with one line naming the file and the key.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, fields
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from textual import on
from textual.app import App
from textual.events import Mount
from textual.color import Color, ColorParseError
from textual.driver import Driver
from textual.screen import Screen
from textual.theme import Theme

from console import paths
from console.crash import report_crash
from console.model import LineKind
from console.ui import render
from console.ui.render import BaseScreen
from console.ui.keymap import ActionSpec

#: The themes shipped with Pulse: package data (console/themes links to the repository's themes/).
BUILTIN_THEME_DIR = files("console") / "themes"
DEFAULT_THEME = "pulse-dark"

COLOR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "success",
    "warning",
    "error",
)
REQUIRED_COLOR_KEYS = ("primary", "foreground", "background")
#: Log-line kinds that get their own colour (normal lines use the foreground).
STYLED_KINDS = tuple(kind for kind in LineKind if kind is not LineKind.NORMAL)


class ThemeError(Exception):
    """A theme file is unusable; the message is one line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Where the GPU pane's gauges change colour."""

    memory_warn_pct: float = 90.0
    memory_crit_pct: float = 97.0
    temperature_warn_c: float = 80.0
    temperature_crit_c: float = 88.0
    utilization_idle_pct: float = 5.0


@dataclass(frozen=True, slots=True)
class PulseTheme:
    """A validated theme file: the Textual theme and the thresholds that go with it."""

    theme: Theme
    thresholds: Thresholds
    path: Traversable


def line_variable(kind: LineKind) -> str:
    """The CSS variable holding the colour of log lines of `kind`, e.g. `line-nccl-timeout`."""
    return "line-" + kind.value.replace("_", "-")


def load_theme_file(path: Traversable) -> PulseTheme:
    """Read and validate one theme file. Raises ThemeError (one line) when it is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ThemeError(f"{path}: cannot read theme file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ThemeError(f"{path}: theme file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ThemeError(f"{path}: invalid TOML: {exc}") from None

    def fail(key: str, problem: str) -> ThemeError:
        return ThemeError(f"{path}: {key}: {problem}")

    _check_keys(data, {"name", "dark", "colors", "lines", "thresholds"}, "", fail)
    name = data.get("name", path.name.removesuffix(".toml"))
    if not isinstance(name, str) or not name.strip():
        raise fail("name", "must be a non-empty string")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise fail("dark", "must be true or false")

    colors = _table(data, "colors", fail)
    _check_keys(colors, set(COLOR_KEYS), "colors.", fail)
    for key in REQUIRED_COLOR_KEYS:
        if key not in colors:
            raise fail(f"colors.{key}", "missing (required)")
    base = {key: _color(value, f"colors.{key}", fail) for key, value in colors.items()}

    lines = _table(data, "lines", fail)
    kinds = {kind.value: kind for kind in STYLED_KINDS}
    _check_keys(lines, set(kinds), "lines.", fail)
    variables = {
        line_variable(kinds[key]): _color(value, f"lines.{key}", fail) for key, value in lines.items()
    }

    raw_thresholds = _table(data, "thresholds", fail)
    names = {f.name for f in fields(Thresholds)}
    _check_keys(raw_thresholds, names, "thresholds.", fail)
    for key, value in raw_thresholds.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise fail(f"thresholds.{key}", f"{value!r} is not a non-negative number")
    thresholds = Thresholds(**{key: float(value) for key, value in raw_thresholds.items()})
    if thresholds.memory_warn_pct > thresholds.memory_crit_pct:
        raise fail("thresholds.memory_warn_pct", "is above memory_crit_pct")
    if thresholds.temperature_warn_c > thresholds.temperature_crit_c:
        raise fail("thresholds.temperature_warn_c", "is above temperature_crit_c")

    get = base.get
    theme = Theme(
        name=name, primary=base["primary"], secondary=get("secondary"), accent=get("accent"), foreground=get("foreground"),
        background=get("background"), surface=get("surface"), panel=get("panel"), success=get("success"),
        warning=get("warning"), error=get("error"), dark=dark, variables=variables,
    )
    return PulseTheme(theme, thresholds, path)


def load_themes(directories: tuple[Traversable, ...] | None = None) -> dict[str, PulseTheme]:
    """Every theme file in `directories` (later ones override earlier ones by name); by default the
    built-in themes, then the operator's own."""
    if directories is None:
        directories = (BUILTIN_THEME_DIR, paths.user_themes_dir())
    themes: dict[str, PulseTheme] = {}
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted((p for p in directory.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name):
            loaded = load_theme_file(path)
            themes[loaded.theme.name] = loaded
    if DEFAULT_THEME not in themes:
        raise ThemeError(f"{BUILTIN_THEME_DIR}: the default theme {DEFAULT_THEME}.toml is missing")
    return themes


def choose_theme(requested: str | None, themes: dict[str, PulseTheme]) -> str:
    """The name to start with: `requested` (a theme name or a .toml path, loaded into `themes`)."""
    if requested is None:
        return DEFAULT_THEME
    if requested.endswith(".toml"):
        loaded = load_theme_file(Path(requested).expanduser())
        themes[loaded.theme.name] = loaded
        return loaded.theme.name
    if requested not in themes:
        known = ", ".join(sorted(themes))
        raise ThemeError(f"--theme {requested}: no such theme (known: {known}; or give a .toml path)")
    return requested


class ThemedApp(App[int]):
    """An app with every Pulse theme registered, `theme` chosen, and Pulse's line colours under any theme.

    Both consoles (one host, a fleet) share its theme key and its help screen over their `action_specs`.
    """

    action_specs: tuple[ActionSpec, ...] = ()
    """The app's wired actions from the one action table (console.ui.keymap)."""
    read_only = False
    settle_heap = False
    """Take what start-up left alive out of the cyclic GC's walks (`settle_start_heap`) when the app
    says its start-up is over (the run's console: its first sample; the fleet console does not
    yet), and resume the GC that `pulse` paused for the start (console.cli.CONSOLE_COMMANDS): set
    where the console runs for real, not in tests, which start many apps in one process."""
    _heap_settled = False
    START_GC_PAUSE_S = 5.0
    """The cyclic GC resumes this long after the app mounted if its start-up has not said it is over
    by then (no sample yet, or the fleet console): a console never runs on without it."""

    def __init__(self, *, theme: str | None = None, themes: dict[str, PulseTheme] | None = None) -> None:
        super().__init__()
        self.pulse_themes = themes if themes is not None else load_themes()
        for pulse_theme in self.pulse_themes.values():
            self.register_theme(pulse_theme.theme)
        self.theme = choose_theme(theme, self.pulse_themes)

    async def take_action(self, action: str) -> None:
        """Run a table action: the command palette's way in, and a verdict's next step."""
        await self.run_action(action)

    def settle_heap_once(self) -> None:
        """Start-up is over (the first data is on screen): settle the heap after this frame, once."""
        if self.settle_heap and not self._heap_settled:
            self._heap_settled = True
            self.call_after_refresh(settle_start_heap)

    def get_default_screen(self) -> Screen:
        return BaseScreen(id="_default")

    def get_driver_class(self) -> type[Driver]:
        return render.driver_class(self) or super().get_driver_class()

    @on(Mount)
    def _resume_gc_at_the_latest(self) -> None:
        if self.settle_heap:
            self.set_timer(self.START_GC_PAUSE_S, lambda: gc.enable())

    @on(Mount)
    def _say_stock_textual(self) -> None:
        notice = render.stock_notice()
        if notice is not None:
            self.log.warning(notice)
            self.notify(notice, severity="warning", timeout=8)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # Textual's own themes lack Pulse's line colours: borrow the default theme's.
        default = self.pulse_themes.get(DEFAULT_THEME) if hasattr(self, "pulse_themes") else None
        return dict(default.theme.variables) if default else {}

    def action_cycle_theme(self) -> None:
        names = sorted(self.pulse_themes, key=lambda name: (name != DEFAULT_THEME, name))
        following = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.theme = following
        self.notify(f"theme: {following}", timeout=2)

    def action_help(self) -> None:
        from console.ui.dialogs.help_screen import HelpScreen  # here: the first frame does not wait for it

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.action_specs, read_only=self.read_only))

    @property
    def thresholds(self) -> Thresholds:
        """The gauge thresholds of the current theme (defaults for a non-Pulse theme)."""
        current = self.pulse_themes.get(self.theme)
        return current.thresholds if current else Thresholds()


def settle_start_heap() -> None:
    """Freeze the objects alive now (modules, styles, widgets: about 100,000) out of the cyclic GC:
    each full collection walked them all, 50 ms every 15 s or so, a fifth of an idle console's CPU.
    Reference counting still frees any of them that is dropped. The GC, paused while the console
    started (console.cli.CONSOLE_COMMANDS), runs again from here on."""
    gc.collect()
    gc.freeze()
    gc.enable()


def run_themed(make_app: Callable[[str, dict[str, PulseTheme]], ThemedApp], args: argparse.Namespace) -> int:
    """Load the themes, choose `--theme`, run `make_app(theme, themes)` until quit; 2 on a bad theme,
    EXIT_CRASH (the traceback saved) when the app crashed."""
    return asyncio.run(run_themed_async(make_app, args))


async def run_themed_async(make_app: Callable[[str, dict[str, PulseTheme]], ThemedApp], args: argparse.Namespace) -> int:
    """`run_themed` in a running event loop (where sources started before the app already run)."""
    try:
        themes = load_themes()
        theme = choose_theme(getattr(args, "theme", None), themes)
    except ThemeError as exc:
        print(f"pulse: {exc}", file=sys.stderr)
        return 2
    app = make_app(theme, themes)
    app.settle_heap = True
    result = await app.run_async()
    # Textual keeps an unhandled exception here, prints it and returns as if the user had quit.
    crashed = render.app_exception(app)
    if crashed is not None:
        return report_crash(crashed)
    return result if isinstance(result, int) else app.return_code or 0


def _table(data: dict, key: str, fail) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise fail(key, "must be a table")
    return value


def _check_keys(table: dict, allowed: set[str], prefix: str, fail) -> None:
    for key in table:
        if key not in allowed:
            raise fail(f"{prefix}{key}", f"unknown key (expected one of: {', '.join(sorted(allowed))})")


def _color(value: object, key: str, fail) -> str:
    if not isinstance(value, str):
        raise fail(key, f"{value!r} is not a colour string")
    try:
        Color.parse(value)
    except ColorParseError:
        raise fail(key, f"{value!r} is not a colour (use #RRGGBB or a colour name)") from None
    return value
