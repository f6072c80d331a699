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
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

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
    sources = await start_sources(config)
    try:
        app = await asyncio.to_thread(importlib.import_module, "console.ui.app")
        return await app.run_console_app(config, args, sources)
    finally:
        await sources.stop()  # the app stops them on quit; this covers a bad theme or a crash before mount


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
