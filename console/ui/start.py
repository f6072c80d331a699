"""`pulse CONFIG` and `pulse demo`: start the console on one run, its sources first.

The UI's modules (Textual, the panes) take about 0.3 s to import; the SSH handshake, the agent's
start on the target and its first sample take about half as long again, most of it in other
processes (sshd, the agent, nvidia-smi). So the monitor starts first and the UI is imported in a
thread meanwhile: the first full frame comes sooner by the shorter of the two. The run's journal
opens before the monitor, on an empty state, as it always has: what arrives while the UI loads is
journaled like everything after it. This module itself imports no Textual.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib
import os
import signal
import sys
import termios
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from console.config import Config
from console.journal.store import JournalError
from console.journal.watch import RunWatch
from console.monitor import Monitor
from console.remote.connect import make_target
from console.remote.target import Target
from console.state import RunState


def run_console(config: Config, args: argparse.Namespace) -> int:
    """Connect to the run's target, start the monitor, and run the console until quit (its exit status).

    A custom action on a key the console binds itself is refused first, in one line, exit 2.
    """
    if config.actions:
        from console.ui.keymap import taken_keys  # loads Textual's bindings: only a config with custom actions pays

        if taken := taken_keys(config):
            print("\n".join(taken), file=sys.stderr)
            return 2
    return asyncio.run(_run_console(config, args))


async def _run_console(config: Config, args: argparse.Namespace) -> int:
    ending = SignalEnding(asyncio.get_running_loop())
    with ending.installed():
        sources = await start_sources(config)
        try:
            app = await asyncio.to_thread(importlib.import_module, "console.ui.app")
            return await app.run_console_app(config, args, sources, ending)
        finally:
            await sources.stop()  # the app stops them on quit; this covers a bad theme or a crash before mount


#: The signals that end the console as `q` does: its terminal closed (SIGHUP), or a plain `kill` (SIGTERM).
ENDING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


@dataclass
class SignalEnding:
    """SIGHUP and SIGTERM end the console as a quit does (the monitor stopped, the journal closed,
    and whatever the caller started, the demo's processes and folder, taken down after), with the
    exit status a shell gives a process a signal ended: 128 + the signal's number.

    A hangup comes with SIGCONT, which Textual takes for a `fg` after Ctrl+Z and answers by drawing
    again into the terminal: once the terminal hung up, SIGCONT does nothing, and the standard
    streams that were the terminal point at /dev/null, so that nothing written to them fails
    (Textual's writer thread dies on EIO, and its full queue then blocks the exit) or blocks.
    Python runs the handlers of signals that arrived together in the order of their numbers, so
    this one (SIGHUP, 1) runs before Textual's (SIGCONT, 18)."""

    loop: asyncio.AbstractEventLoop
    signum: int | None = None
    """The first ending signal that came (None: none did)."""
    _exit_app: Callable[[int], None] | None = field(default=None, repr=False)

    def exit_with(self, exit_app: Callable[[int], None]) -> None:
        """`exit_app(status)` ends the console from now on; a signal that came before it ends it at once."""
        self._exit_app = exit_app
        self._end()

    @contextmanager
    def installed(self) -> Iterator[SignalEnding]:
        """The handlers, in place while the console runs; the previous ones back after it."""
        # One ignored stays ignored (`nohup pulse …`: a closed terminal does not end it).
        previous = {sig: signal.getsignal(sig) for sig in ENDING_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if release_hung_up_terminal():
            signal.signal(signal.SIGCONT, _nothing_to_resume)
        self.signum = self.signum or signum
        # In a signal handler, between two bytecodes of whatever the loop was doing: the exit is
        # left to the loop.
        self.loop.call_soon_threadsafe(self._end)

    def _end(self) -> None:
        if self.signum is not None and self._exit_app is not None:
            self._exit_app(128 + self.signum)


def _nothing_to_resume(signum: int, frame: object) -> None:
    """SIGCONT once the terminal hung up: there is no terminal to draw into again."""


def release_hung_up_terminal() -> bool:
    """Point each standard stream whose terminal hung up at /dev/null; whether any had."""
    hung_up = [fd for fd in (0, 1, 2) if _hung_up(fd)]
    if hung_up:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in hung_up:
            os.dup2(null, fd)
        os.close(null)
    return bool(hung_up)


def _hung_up(fd: int) -> bool:
    """A terminal that hung up answers every request but a close with EIO (a file, a pipe or a
    closed descriptor answers otherwise)."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return exc.args[0] == errno.EIO
    return False


@dataclass
class Sources:
    """One run's target, state, journal and monitor, running before the UI is there."""

    target: Target
    state: RunState
    watch: RunWatch | None
    monitor: Monitor
    terminal: list[Callable[[str], None]]
    """The app's terminal writer once an app took the watch (an alert before it skips the terminal)."""

    async def stop(self) -> None:
        await self.monitor.stop()
        if self.watch is not None and not self.terminal:
            await self.watch.close()  # no app took it (a bad theme); an app closes it on quit


async def start_sources(config: Config) -> Sources:
    """The journal opens on the empty state, then the monitor starts: what arrives while the UI
    loads is journaled like everything after it."""
    target, state = make_target(config.target), RunState()
    terminal: list[Callable[[str], None]] = []
    watch = open_watch(config, state, lambda text: terminal[0](text) if terminal else None)
    monitor = Monitor(config, target, state)
    await monitor.start()
    return Sources(target, state, watch, monitor, terminal)


def open_watch(config: Config, state: RunState, terminal_write: Callable[[str], None]) -> RunWatch | None:
    """The run's journal and alerts for the console; without them (one line on stderr) when the journal cannot open."""
    try:
        return RunWatch.open(config, state, terminal_write=terminal_write)
    except JournalError as exc:
        print(f"pulse: no journal this time: {exc}", file=sys.stderr)
        return None
