"""`pulse demo` in a real terminal (tmux): GPU rows and log lines appear, `q` quits, nothing is left running."""

from __future__ import annotations

import json
import os
import signal
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


def demo_record(tmp_path: Path, deadline: float) -> dict:
    """The record a demo started under TMPDIR=tmp_path writes (its PIDs and folder), once it is there."""
    records: list[Path] = []
    while not records:
        assert time.monotonic() < deadline, "the demo never wrote its record"
        records = list(tmp_path.glob(f"pulse-demo-*/{RECORD_NAME}"))
        time.sleep(0.1)
    return json.loads(records[0].read_text())


def test_pulse_demo_shows_the_run_and_q_leaves_no_process(tmp_path):
    if not PULSE.exists():
        pytest.skip("pulse is not installed in .venv (.venv/bin/pip install -e .)")
    command = f"cd {PACKAGE_ROOT} && TMPDIR={tmp_path} TEXTUAL_ANIMATIONS=none {PULSE} demo"
    with TmuxSession(f"pulse-demo-smoke-{tmp_path.name}", command, (120, 40)) as terminal:
        deadline = time.monotonic() + WAIT_S
        record = demo_record(tmp_path, deadline)
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


@pytest.mark.parametrize("leader", ["shell", "pulse"])
def test_a_closed_terminal_sighup_ends_the_demo_without_a_crash_file(tmp_path, leader):
    """Issue 33: SIGHUP raised SystemExit(129) inside Textual's loop: a crash file, then "no running
    event loop" in Textual's SIGCONT handler; or the console hung for ever on its way out. It ends
    as a quit does (console/ui/start.py `SignalEnding`): the hangup's SIGCONT resumes nothing, and
    what is written to the hung-up terminal is dropped (console/ui/render/input_driver.py), so no
    writer thread dies with a full queue that blocks the exit."""
    if not PULSE.exists():
        pytest.skip("pulse is not installed in .venv (.venv/bin/pip install -e .)")
    state = tmp_path / "state"
    # Under a shell, the demo is in the terminal's foreground group: SIGHUP when the shell is gone. As the
    # session's leader (`ssh -t host pulse demo`, `xterm -e`), it gets SIGHUP and SIGCONT at once.
    run = {"shell": "", "pulse": "exec "}[leader]
    command = f"cd {PACKAGE_ROOT} && XDG_STATE_HOME={state} TMPDIR={tmp_path} TEXTUAL_ANIMATIONS=none {run}{PULSE} demo"
    with TmuxSession(f"pulse-demo-hup-{leader}-{tmp_path.name}", command, (120, 40)) as terminal:
        deadline = time.monotonic() + WAIT_S
        record = demo_record(tmp_path, deadline)
        terminal.wait_for(lambda rows: any("loss" in row for row in rows), WAIT_S, "the demo never showed its run")
        started = {record["pid"], record["trainer_pid"], *descendants(record["pid"])}
    # The terminal closed (tmux's server gone): its pty hangs up and the demo gets SIGHUP.
    deadline = time.monotonic() + 60
    while any(running(pid) for pid in started):
        left = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:120] for p in started if running(p)]
        assert time.monotonic() < deadline, f"still running after SIGHUP: {left}"
        time.sleep(0.1)
    assert not list(state.glob("pulse/crashes/*")), [p.read_text() for p in state.glob("pulse/crashes/*")]
    assert not Path(record["dir"]).exists()
