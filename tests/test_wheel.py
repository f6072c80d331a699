"""What the wheel will hold and need, checked on the source tree (scripts/wheel-check builds and runs
the real wheel in CI): the themes are package data read through importlib.resources, dependencies are
ranges with py-spy among them, and the lock files pin versions inside those ranges, with hashes."""

from __future__ import annotations

import re
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from console.ui.themes import BUILTIN_THEME_DIR, DEFAULT_THEME, load_themes

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
LOCKED_LINE = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)(?: ;[^\\]*)? \\$")


def requirements(names: list[str]) -> list[Requirement]:
    return [Requirement(text) for text in names]


def locked(lock: str) -> dict[str, str]:
    """{package: version} of a lock file; every pin must be followed by its hashes."""
    lines = (REPO / lock).read_text().splitlines()
    pins = {}
    for number, line in enumerate(lines):
        if match := LOCKED_LINE.match(line):
            assert lines[number + 1].strip().startswith("--hash=sha256:"), f"{lock}: {match[1]} has no hash"
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def test_the_themes_folder_ships_as_package_data():
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["console"]
    package = Path(str(files("console")))
    shipped = {path.relative_to(package).as_posix() for pattern in globs for path in package.glob(pattern)}
    themes = {f"themes/{path.name}" for path in (REPO / "themes").glob("*.toml")}
    assert f"themes/{DEFAULT_THEME}.toml" in themes and themes <= shipped


def test_the_builtin_themes_load_through_importlib_resources():
    assert BUILTIN_THEME_DIR == files("console") / "themes"
    names = sorted(path.name for path in BUILTIN_THEME_DIR.iterdir())
    assert names == sorted(path.name for path in (REPO / "themes").glob("*.toml"))
    assert set(load_themes((BUILTIN_THEME_DIR,))) == {name.removesuffix(".toml") for name in names}


def test_dependencies_are_compatible_ranges_and_py_spy_is_one():
    runtime = requirements(PROJECT["dependencies"])
    pinned = [str(r) for r in [*runtime, *requirements(PROJECT["optional-dependencies"]["test"])]
              if any(spec.operator in ("==", "===") for spec in r.specifier)]
    assert not pinned
    assert {"py-spy", "platformdirs", "shtab", "textual"} <= {canonicalize_name(r.name) for r in runtime}


@pytest.mark.parametrize(
    ("lock", "extras"), [("requirements.lock", []), ("requirements-test.lock", ["test"])]
)
def test_the_lock_pins_every_dependency_inside_its_range(lock, extras):
    pins = locked(lock)
    wanted = requirements(PROJECT["dependencies"] + [r for extra in extras for r in PROJECT["optional-dependencies"][extra]])
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock} does not lock {name} (scripts/lock)"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{lock}: {name}=={pins[name]} is outside {requirement}"


def test_the_two_locks_agree():
    runtime, test = locked("requirements.lock"), locked("requirements-test.lock")
    assert {name: test.get(name) for name in runtime} == runtime
