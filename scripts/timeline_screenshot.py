#!/usr/bin/env python3
"""Save an SVG of the timeline screen (`h`) over a fast-forwarded six-hour journal, for the README.

    .venv/bin/python scripts/timeline_screenshot.py [--out docs/screenshots/timeline.svg] [--size 140x40]

The journal is the one scripts/bench_journal.py writes (healthy, slow, a hang, a restart, an SSH
cut), in a temporary folder; the console opens on it with no live source, as one reopened on a run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_journal import simulate  # noqa: E402


async def screenshot(journal: Path, out: Path, size: tuple[int, int]) -> None:
    from console.config import Config, MetricsConfig, RunConfig, TargetConfig
    from console.journal.store import Journal
    from console.journal.watch import RunWatch
    from console.state import RunState
    from console.ui.app import PulseApp

    config = Config(target=TargetConfig(host="root@gpu-node-7"), run=RunConfig(name="dflash"),
                    metrics=MetricsConfig(baseline_tokens_per_s=14200))
    state = RunState()
    app = PulseApp(config, state, watch=lambda app: RunWatch(config, state, Journal(journal), []))
    app.animation_level = "none"
    async with app.run_test(size=size) as pilot:
        await pilot.press("h")
        await app.workers.wait_for_complete()
        await pilot.pause(0.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=out.name, path=str(out.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/screenshots/timeline.svg")
    parser.add_argument("--size", default="140x40")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as scratch:
        journal = Path(scratch) / "dflash.sqlite3"
        simulate(6.05, journal)
        asyncio.run(screenshot(journal, args.out, (width, height)))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
