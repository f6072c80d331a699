"""The console's input thread sleeps until there is input (console/ui/render/input_driver.py): in a real
terminal, keys still arrive, a lone Esc is still a key once its wait is over, and q still ends
the console at once (the thread is woken to stop, not polled); a stdin that is no terminal
(/dev/null, a pipe that has ended) starts the console all the same."""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from pathlib import Path

import pytest

from console.ui.render.input_driver import TerminalOutput, WakingEvent
from tests.test_terminal_scroll import ROOT, SIZE
from tests.tmux import TmuxSession, needs_tmux

#: Seconds with no input over which the input thread's wake-ups are counted: Textual's own wakes ten times a second.
QUIET_S = 2.0


def scrolling_log(out: Path, stdin: str = "terminal") -> str:
    """The shell command running tests/snapshot_apps/scrolling_log.py with `stdin`: the terminal,
    /dev/null, or a pipe whose writer has ended."""
    app = f"TEXTUAL_ANIMATIONS=none {sys.executable} -m tests.snapshot_apps.scrolling_log {out}"
    return f"cd {ROOT} && " + {"terminal": app, "dev-null": f"{app} < /dev/null", "ended-pipe": f"true | {app}"}[stdin]


def started(out: Path) -> dict:
    deadline = time.monotonic() + 60
    while not out.exists():
        assert time.monotonic() < deadline, "the console never drew its lines"
        time.sleep(0.1)
    return json.loads(out.read_text())


def wakeups(pid: int, thread: int) -> int:
    status = Path(f"/proc/{pid}/task/{thread}/status").read_text()
    return sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)


@needs_tmux
def test_keys_a_lone_escape_and_quitting_reach_the_console_and_its_input_thread_sleeps_meanwhile(tmp_path):
    out = tmp_path / "frame.json"
    with TmuxSession(f"pulse-input-{tmp_path.name}", scrolling_log(out), SIZE) as terminal:
        frame = started(out)
        assert frame["driver"] == "QuietLinuxDriver"
        before = wakeups(frame["pid"], frame["input_thread"])
        time.sleep(QUIET_S)
        assert wakeups(frame["pid"], frame["input_thread"]) - before <= 2  # Textual's: ~20
        terminal.keys("?")
        terminal.wait_for(lambda rows: any("Pulse keys" in row for row in rows), 10, "? did not open the help")
        terminal.keys("Escape")  # alone: a key only once the parser's wait for more of a sequence is over
        terminal.wait_for(lambda rows: not any("Pulse keys" in row for row in rows), 10, "Esc did not close the help")
        # A character whose bytes arrive apart: the first decodes to nothing until the second comes.
        terminal.keys("/")
        terminal.wait_for(lambda rows: "Quit" not in rows[-1], 10, "/ did not open the search (the footer keeps the console's keys)")
        terminal.keys("-H", "c3")
        time.sleep(0.3)
        terminal.keys("-H", "a9")
        terminal.keys("x", "Enter")
        terminal.wait_for(lambda rows: any("search “éx”" in row for row in rows), 10, "é typed in two reads did not arrive")
        terminal.keys("q")
        deadline = time.monotonic() + 10
        while terminal.running():
            assert time.monotonic() < deadline, "q did not end the console"
            time.sleep(0.1)


@needs_tmux
@pytest.mark.parametrize("stdin", ["dev-null", "ended-pipe"])
def test_a_stdin_that_is_no_terminal_starts_the_console_and_its_end_is_not_waited_on(tmp_path, stdin):
    out = tmp_path / "frame.json"
    with TmuxSession(f"pulse-stdin-{tmp_path.name}", scrolling_log(out, stdin), SIZE) as terminal:
        frame = started(out)
        assert terminal.running() and frame["driver"] == "QuietLinuxDriver"
        terminal.wait_for(lambda rows: any("Log ·" in row for row in rows), 10, "the console drew no log")
        before = wakeups(frame["pid"], frame["input_thread"])
        time.sleep(QUIET_S)
        assert wakeups(frame["pid"], frame["input_thread"]) - before <= 2  # an ended stdin is not read again and again


def test_setting_the_event_wakes_a_thread_blocked_on_its_pipe_and_closing_forgets_the_pipe():
    event = WakingEvent()
    woken = []
    waiter = threading.Thread(target=lambda: woken.append(select.select([event.wake_read], [], [])[0]))
    waiter.start()
    event.set()
    waiter.join(timeout=10)
    assert woken == [[event.wake_read]] and event.is_set()
    event.drain()
    assert select.select([event.wake_read], [], [], 0)[0] == []  # drained: the next wait blocks
    event.close()
    assert (event.wake_read, event.wake_write) == (-1, -1)
    event.close()  # a second close touches no file that took the pipe's numbers
    event.set()
    event.drain()


def test_the_output_writes_to_the_terminal_until_it_hangs_up_then_drops_what_comes():
    """Textual's writer thread died on a hung-up terminal's EIO, and its full queue then blocked the
    console's exit (issue 33: a closed terminal)."""
    master, slave = os.openpty()
    with open(slave, "w", encoding="utf-8") as stream:
        output = TerminalOutput(stream)
        output.write("é frame")
        assert os.read(master, 64) == "é frame".encode()
        os.close(master)  # the terminal window closed: its pty hangs up
        output.write("the next frame")
        output.flush()
        assert output.failed
