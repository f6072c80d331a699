"""`pulse demo` in a real terminal (tmux): GPU rows and log lines appear, `q` quits, nothing is left running."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from console.demo.run import PACKAGE_ROOT, RECORD_NAME

PULSE = PACKAGE_ROOT / ".venv" / "bin" / "pulse"
WAIT_S = 90.0

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup --test)")


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
    socket = f"pulse-demo-smoke-{tmp_path.name}"
    tmux = ["tmux", "-L", socket]
    command = f"cd {PACKAGE_ROOT} && TMPDIR={tmp_path} TEXTUAL_ANIMATIONS=none {PULSE} demo"
    subprocess.run([*tmux, "new-session", "-d", "-s", "demo", "-x", "120", "-y", "40", command], check=True)
    try:
        deadline = time.monotonic() + WAIT_S
        records: list[Path] = []
        while not records:
            assert time.monotonic() < deadline, "the demo never wrote its record"
            records = list(tmp_path.glob(f"pulse-demo-*/{RECORD_NAME}"))
            time.sleep(0.1)
        record = json.loads(records[0].read_text())
        screen = ""
        while not ("H200" in screen and "target" in screen and "step " in screen and "loss" in screen):
            assert time.monotonic() < deadline, f"the screen never showed GPUs and log lines:\n{screen}"
            time.sleep(0.25)
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "demo"], capture_output=True, text=True).stdout
        started = {record["pid"], record["trainer_pid"], *descendants(record["pid"])}
        assert record["trainer_pid"] in started and len(started) >= 3  # demo, trainer, the agents' shells
        subprocess.run([*tmux, "send-keys", "-t", "demo", "q"], check=True)
        while any(running(pid) for pid in started):
            assert time.monotonic() < deadline, f"still running after q: {[p for p in started if running(p)]}"
            time.sleep(0.1)
        assert not Path(record["dir"]).exists()
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
