"""The layers of docs/design.md, and rules the whole source keeps, checked on the source.

The import directions (layers, a core without Textual, pure modules without I/O) are
import-linter contracts in pyproject.toml; this runs them so that CI does.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_import_contracts_are_kept():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this tree's console, not an installed copy
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_source_bounds_a_wait_with_asyncio_wait_for():
    """On Python 3.11 wait_for drops a cancel that lands as its awaitable completes; asyncio.timeout does not.

    That lost cancel left a busy log's follower and agent running after stop() (tests/test_monitor.py).
    """
    users = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "console").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "asyncio.wait_for(" in line
    ]
    assert users == [], "use `async with asyncio.timeout(...)` instead"
