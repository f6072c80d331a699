"""Theme files: the shipped ones load, bad ones stop start-up with one line naming file and key."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from console.model import LineKind
from console.ui.start import run_console
from console.ui.themes import (
    BUILTIN_THEME_DIR,
    STYLED_KINDS,
    ThemeError,
    choose_theme,
    line_variable,
    load_theme_file,
    load_themes,
)
from tests.snapshot_apps.scenarios import make_config

GOOD = """
name = "mine"
dark = true
[colors]
primary = "#112233"
foreground = "#eeeeee"
background = "#000000"
[lines]
oom = "magenta"
[thresholds]
memory_warn_pct = 80
"""


def write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_themes_load_with_every_line_colour():
    themes = load_themes((BUILTIN_THEME_DIR,))
    assert {"pulse-dark", "pulse-light", "pulse-high-contrast"} <= set(themes)
    for loaded in themes.values():
        assert set(loaded.theme.variables) == {line_variable(kind) for kind in STYLED_KINDS}
    assert not themes["pulse-light"].theme.dark
    assert line_variable(LineKind.NCCL_TIMEOUT) == "line-nccl-timeout"


def test_a_good_file_gives_a_theme_and_thresholds(tmp_path):
    loaded = load_theme_file(write(tmp_path, GOOD))
    assert loaded.theme.name == "mine"
    assert loaded.theme.variables == {"line-oom": "magenta"}
    assert loaded.thresholds.memory_warn_pct == 80
    assert loaded.thresholds.temperature_crit_c == 88  # default kept


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (('primary = "#112233"', 'primary = "#11223"'), "colors.primary: '#11223' is not a colour"),
        (('primary = "#112233"', 'primry = "#112233"'), "colors.primry: unknown key"),
        (('background = "#000000"\n', ""), "colors.background: missing (required)"),
        (('oom = "magenta"', 'oomm = "magenta"'), "lines.oomm: unknown key"),
        (("memory_warn_pct = 80", 'memory_warn_pct = "high"'), "thresholds.memory_warn_pct: 'high' is not a non-negative number"),
        (("memory_warn_pct = 80", "memory_warn_pct = 99"), "thresholds.memory_warn_pct: is above memory_crit_pct"),
        (("dark = true", "dark = 1"), "dark: must be true or false"),
        (("[colors]", "[colors\n"), "invalid TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_key(tmp_path, change, expected):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ThemeError) as error:
        load_theme_file(path)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(str(path)) and expected in message


def test_theme_flag_takes_a_name_or_a_file(tmp_path):
    themes = load_themes((BUILTIN_THEME_DIR,))
    assert choose_theme(None, themes) == "pulse-dark"
    assert choose_theme("pulse-light", themes) == "pulse-light"
    assert choose_theme(str(write(tmp_path, GOOD)), themes) == "mine" and "mine" in themes
    with pytest.raises(ThemeError, match="--theme nope: no such theme"):
        choose_theme("nope", themes)


def test_console_refuses_to_start_on_an_unknown_theme(capsys):
    args = argparse.Namespace(theme="pulse-purple", read_only=False)
    assert run_console(make_config(), args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--theme pulse-purple: no such theme" in err[0]


async def test_no_color_is_respected(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    from tests.snapshot_apps.scenarios import make_app

    app = make_app()
    async with app.run_test(size=(100, 30)):
        assert app.no_color
