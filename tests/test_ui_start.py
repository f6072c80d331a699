"""console/ui/start.py: the run's sources start before the UI loads, and the journal sees all they bring.

A real run writing a real log, followed by the real monitor on this machine; the UI's import is
what would take the time, so the sources run here alone, as they do while it loads.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.config import Config, GpuConfig, RunConfig
from console.journal.store import journal_path, open_for_reading, read_entries
from console.ui.start import start_sources
from tests.test_agent import spawn, unique_name  # noqa: F401  (spawn is a fixture)
from tests.test_demo_smoke import PULSE, descendants, running
from tests.test_sampler import until
from tests.tmux import TmuxSession, needs_tmux

HEALTHY = Path(__file__).parent / "procs" / "healthy.py"
CRASHED_BEFORE = (
    "Traceback (most recent call last):\n"
    '  File "/w/train.py", line 12, in <module>\n'
    "RuntimeError: the data loader ran out of shards\n"
)


async def test_what_arrives_while_the_ui_loads_is_journaled(spawn, tmp_path: Path, monkeypatch) -> None:
    """The journal opens on the empty state before the monitor starts: a problem already in the
    log's backlog, which arrives within milliseconds, is journaled (a journal opened after it
    took it for history from before the console and left it out)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    name = unique_name()
    log = tmp_path / "run.log"
    log.write_text(CRASHED_BEFORE)
    spawn([sys.executable, str(HEALTHY), "--interval", "0.1", f"--tag={name}"], stdout=log.open("a"))
    config = Config(run=RunConfig(name=name, match=rf"--tag={name}\b", log=str(log)), gpus=GpuConfig(source="none", poll_s=0.2))
    sources = await start_sources(config)
    try:
        await until(lambda: len(sources.state.lines) > 5 and sources.state.latest is not None, "the backlog and new lines")
        sources.watch.observe()
    finally:
        await sources.stop()
    entries = read_entries(open_for_reading(journal_path(config)))
    problems = [e.data["problem"] for e in entries if e.kind == "problem"]
    assert problems == ["traceback"], [(e.kind, e.text) for e in entries]


@needs_tmux
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_signal_ends_the_console_as_q_does_without_a_crash_file(spawn, tmp_path: Path, signum: int) -> None:
    """`kill -HUP` or `kill -TERM` of `pulse --log … --match …` in a terminal ends the console as a
    quit does: its agents gone, the terminal given back (its own screen, its modes), exit 128 + the
    signal, no crash file. Before, the signal's default action killed it mid-frame: the terminal
    left raw, in the console's screen."""
    if not PULSE.exists():
        pytest.skip("pulse is not installed in .venv (.venv/bin/pip install -e .)")
    name, log, state, ended = unique_name(), tmp_path / "run.log", tmp_path / "state", tmp_path / "ended"
    spawn([sys.executable, str(HEALTHY), "--interval", "0.1", f"--tag={name}"], stdout=log.open("w"))
    console = shlex.join([str(PULSE), "--log", str(log), "--match", rf"healthy\.py .*--tag={name}\b"])
    # After the console: its exit status and the terminal's modes, then the terminal stays open to be read.
    after = f"echo $? > {ended}.tmp; stty -a >> {ended}.tmp; mv {ended}.tmp {ended}; sleep 60"
    command = f"cd {tmp_path} && XDG_STATE_HOME={state} PYTHONPATH={os.environ.get('PYTHONPATH', '')} {console}; {after}"
    with TmuxSession(f"pulse-{signal.Signals(signum).name}-{tmp_path.name}", command, (120, 40)) as terminal:
        terminal.wait_for(lambda rows: any("loss" in row for row in rows), 60, "the console never showed its run")
        shell = int(subprocess.run([*terminal.tmux, "display", "-p", "-t", "main", "#{pane_pid}"], capture_output=True, text=True, check=True).stdout)
        (pulse,) = [pid for pid in descendants(shell) if b"bin/pulse" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        started = {pulse, *descendants(pulse)}  # the console and its agents
        os.kill(pulse, signum)
        deadline = time.monotonic() + 30
        while not ended.exists():
            assert time.monotonic() < deadline, "the console did not end; it shows:\n" + "\n".join(terminal.screen())
            time.sleep(0.1)
        status, modes = ended.read_text().split("\n", 1)
        assert status == str(128 + signum)
        assert " icanon " in f" {modes} " and " echo " in f" {modes} ", modes  # not left raw
        assert not any("loss" in row for row in terminal.screen())  # the terminal's own screen is back
        assert not [pid for pid in started if running(pid)]
    assert not list(state.glob("pulse/crashes/*")), [p.read_text() for p in state.glob("pulse/crashes/*")]
