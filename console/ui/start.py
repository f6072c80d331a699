"""`pulse CONFIG` and `pulse demo`: start the console on one run, its sources first.

The UI's modules (Textual, the panes, the journal) take about 0.3 s to import; the SSH
handshake, the agent's start on the target and its first sample take about as long again,
most of it in other processes (sshd, the agent, nvidia-smi). So the monitor starts first and
the UI is imported in a thread meanwhile: the first full frame comes sooner by the shorter of
the two. This module itself imports no Textual.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib

from console.config import Config
from console.monitor import Monitor
from console.remote.connect import make_target
from console.state import RunState


def run_console(config: Config, args: argparse.Namespace) -> int:
    """Connect to the run's target, start the monitor, and run the console until quit (its exit status)."""
    return asyncio.run(_run_console(config, args))


async def _run_console(config: Config, args: argparse.Namespace) -> int:
    target = make_target(config.target)
    state = RunState()
    monitor = Monitor(config, target, state)
    await monitor.start()
    try:
        app = await asyncio.to_thread(importlib.import_module, "console.ui.app")
        return await app.run_console_app(config, args, target, state, monitor)
    finally:
        await monitor.stop()  # the app stops it on quit; this covers a bad theme or a crash before mount
