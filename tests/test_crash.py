"""No crash goes unseen: an unexpected error exits EXIT_CRASH (70) with its traceback saved under the
state folder and one line saying where, also when Textual catches it inside the console."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

from console.crash import EXIT_CRASH, report_crash
from tests.tmux import TmuxSession, needs_tmux

REPO = Path(__file__).resolve().parent.parent
WAIT_S = 60.0

#: A console whose first refresh hits a real bug (a missing key), run as `pulse` runs its apps.
CRASHING_CONSOLE = """
import argparse, sys
from console.ui.themes import ThemedApp, run_themed

class Crashing(ThemedApp):
    def on_mount(self):
        self.set_timer(0.2, self.refresh_panes)

    def refresh_panes(self):
        sample = {}
        print(sample["gpus"])

sys.exit(run_themed(lambda theme, themes: Crashing(theme=theme, themes=themes), argparse.Namespace(theme=None)))
"""


def test_report_crash_saves_the_traceback_for_the_owner_and_says_where(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    try:
        {}["gpus"]
    except KeyError as error:
        assert report_crash(error) == EXIT_CRASH
    [saved] = (tmp_path / "pulse" / "crashes").glob("crash-*.txt")
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "KeyError: 'gpus'" in text
    assert capsys.readouterr().err == f"pulse: crashed (KeyError: 'gpus'); traceback saved in {saved}\n"


@needs_tmux
def test_a_crash_inside_the_console_exits_70_and_says_where_its_traceback_is(tmp_path):
    script = tmp_path / "crashing_console.py"
    script.write_text(CRASHING_CONSOLE)
    rc_file = tmp_path / "rc"
    command = (
        f"cd {REPO} && XDG_STATE_HOME={tmp_path / 'state'} PYTHONPATH={REPO} TEXTUAL_ANIMATIONS=none "
        f"{sys.executable} {script}; echo $? > {rc_file}; sleep 600"
    )
    with TmuxSession(f"pulse-crash-{tmp_path.name}", command, (200, 50)) as terminal:
        deadline = time.monotonic() + WAIT_S
        while not (rc_file.exists() and rc_file.read_text().strip()):
            assert time.monotonic() < deadline, "the crashing console never exited"
            time.sleep(0.1)
        screen = "\n".join(terminal.screen("-J"))
    assert rc_file.read_text().strip() == str(EXIT_CRASH)
    [saved] = (tmp_path / "state" / "pulse" / "crashes").glob("crash-*.txt")
    text = saved.read_text()
    assert "in refresh_panes" in text and "KeyError: 'gpus'" in text
    assert f"pulse: crashed (KeyError: 'gpus'); traceback saved in {saved}" in screen
