"""`pulse demo` in a real terminal (tmux): GPU rows and log lines appear, `q` quits, nothing is left running."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from console.demo.run import PACKAGE_ROOT, RECORD_NAME
from tests.tmux import TmuxSession, needs_tmux

PULSE = PACKAGE_ROOT / ".venv" / "bin" / "pulse"
WAIT_S = 90.0

pytestmark = needs_tmux


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            found.update(kids)
            frontier += kids
    return found


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_pulse_demo_shows_the_run_and_q_leaves_no_process(tmp_path):
    if not PULSE.exists():
        pytest.skip("pulse is not installed in .venv (.venv/bin/pip install -e .)")
    command = f"cd {PACKAGE_ROOT} && TMPDIR={tmp_path} TEXTUAL_ANIMATIONS=none {PULSE} demo"
    with TmuxSession(f"pulse-demo-smoke-{tmp_path.name}", command, (120, 40)) as terminal:
        deadline = time.monotonic() + WAIT_S
        records: list[Path] = []
        while not records:
            assert time.monotonic() < deadline, "the demo never wrote its record"
            records = list(tmp_path.glob(f"pulse-demo-*/{RECORD_NAME}"))
            time.sleep(0.1)
        record = json.loads(records[0].read_text())
        terminal.wait_for(
            lambda rows: all(any(word in row for row in rows) for word in ("H200", "target", "step ", "loss")),
            deadline - time.monotonic(),
            "the screen never showed GPUs and log lines",
        )
        started = {record["pid"], record["trainer_pid"], *descendants(record["pid"])}
        assert record["trainer_pid"] in started and len(started) >= 3  # demo, trainer, the agents' shells
        terminal.keys("q")
        while any(running(pid) for pid in started):
            assert time.monotonic() < deadline, f"still running after q: {[p for p in started if running(p)]}"
            time.sleep(0.1)
        assert not Path(record["dir"]).exists()
