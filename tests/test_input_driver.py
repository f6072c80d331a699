"""The console's input thread sleeps until there is input (console/ui/input_driver.py): in a real
terminal, keys still arrive, a lone Esc is still a key once its wait is over, and q still ends
the console at once (the thread is woken to stop, not polled)."""

from __future__ import annotations

import os
import select
import sys
import threading
import time

from console.ui.input_driver import WakingEvent
from tests.tmux import TmuxSession, needs_tmux
from tests.test_terminal_scroll import ROOT, SIZE


@needs_tmux
def test_keys_a_lone_escape_and_quitting_reach_the_console_in_a_real_terminal(tmp_path):
    out = tmp_path / "frame.json"
    command = f"cd {ROOT} && TEXTUAL_ANIMATIONS=none {sys.executable} -m tests.snapshot_apps.scrolling_log {out}"
    with TmuxSession(f"pulse-input-{tmp_path.name}", command, SIZE) as terminal:
        terminal.wait_for(lambda rows: any("Log ·" in row for row in rows), 60, "the console never drew its log")
        terminal.keys("?")
        terminal.wait_for(lambda rows: any("Pulse keys" in row for row in rows), 10, "? did not open the help")
        terminal.keys("Escape")  # alone: a key only once the parser's wait for more of a sequence is over
        terminal.wait_for(lambda rows: not any("Pulse keys" in row for row in rows), 10, "Esc did not close the help")
        terminal.keys("q")
        deadline = time.monotonic() + 10
        while terminal.running():
            assert time.monotonic() < deadline, "q did not end the console"
            time.sleep(0.1)


def test_setting_the_event_wakes_a_thread_blocked_on_its_pipe():
    event = WakingEvent()
    try:
        woken = []
        waiter = threading.Thread(target=lambda: woken.append(select.select([event.wake_read], [], [])[0]))
        waiter.start()
        event.set()
        waiter.join(timeout=10)
        assert woken == [[event.wake_read]] and event.is_set()
        event.drain()
        assert select.select([event.wake_read], [], [], 0)[0] == []  # drained: the next wait blocks
    finally:
        event.close()
        event.close()  # twice: a driver closed after its app's second stop
    for fd in (event.wake_read, event.wake_write):
        try:
            os.fstat(fd)
        except OSError:
            continue
        raise AssertionError(f"fd {fd} left open")
