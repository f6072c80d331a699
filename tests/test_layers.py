"""The layers of design.md, checked on the source: the core never imports Textual, parsers do no I/O."""

import ast
from pathlib import Path

import pytest

CONSOLE = Path(__file__).resolve().parents[1] / "console"

#: Pure modules: text in, data out. They may not reach the network, processes or the UI.
PURE = [
    "model.py",
    "state.py",
    "units.py",
    "diagnose.py",
    "remote/shell.py",
    "fleet/slurm_text.py",
    "observe/lines.py",
    "observe/textsafe.py",
    "observe/smi.py",
    "observe/pyspy.py",
    "journal/report.py",
]
IO_MODULES = {"subprocess", "socket", "asyncssh", "asyncio", "pynvml", "textual", "shutil"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def core_files():
    for path in sorted(CONSOLE.rglob("*.py")):
        rel = path.relative_to(CONSOLE).as_posix()
        if not rel.startswith(("ui/", "demo/")):
            yield rel


@pytest.mark.parametrize("rel", list(core_files()))
def test_core_does_not_import_textual(rel):
    assert "textual" not in imported_roots(CONSOLE / rel)


@pytest.mark.parametrize("rel", PURE)
def test_pure_modules_do_no_io(rel):
    path = CONSOLE / rel
    if not path.exists():
        pytest.skip(f"{rel} not written yet")
    assert not imported_roots(path) & IO_MODULES


@pytest.mark.parametrize("rel", [p for p in core_files()])
def test_core_does_not_import_the_demo(rel):
    source = (CONSOLE / rel).read_text()
    assert "console.demo" not in source or rel == "cli.py"
