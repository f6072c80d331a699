#!/usr/bin/env python3
"""Save an SVG screenshot of `pulse demo` for each scenario (default theme), for the README.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--scenario hang ...] [--size 120x40] [--keys g]

Each scenario runs for real (trainer, stand-in nvidia-smi, in-process SSH server), fast-forwarded
so its fault shows within seconds, in a headless console of a fixed size; the screenshot is taken
once the scenario has had time to show itself, and `--keys` pressed (`g`: the GPU graphs; saved as
demo-SCENARIO-g.svg). Everything started is stopped by PID afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.demo.run import DemoRun  # noqa: E402
from console.demo.trainer import SCENARIOS  # noqa: E402

#: Fast-forward: ~4 steps a second, the fault at step 12.
TRAINER_ARGS = ("--step-s", "0.25", "--fault-step", "12")
#: Seconds to let each scenario play before the screenshot (the stall ones wait out the 20 s threshold; a
#: slowdown its look at the stacks, which names its cause).
SETTLE_S = {"healthy": 12, "slow": 26, "oom": 10, "nan": 10, "hang": 30, "buffered": 40, "dead": 12}


async def screenshot(scenario: str, out: Path, size: tuple[int, int], keys: str = "") -> Path:
    """Run the demo for `scenario` headless, press `keys`, and save its screen as out/demo-SCENARIO[-KEYS].svg."""
    from console.monitor import Monitor
    from console.remote.connect import make_target
    from console.state import RunState
    from console.ui.app import PulseApp

    with DemoRun(scenario, trainer_args=TRAINER_ARGS) as demo:
        config = demo.start()
        target = make_target(config.target)
        state = RunState()
        app = PulseApp(
            config,
            state,
            monitor_factory=lambda on_change: Monitor(config, target, state, on_change),
            target=target,
        )
        async with app.run_test(size=size) as pilot:
            await asyncio.sleep(SETTLE_S[scenario])
            await pilot.press(*keys)
            await pilot.pause(0.5)
            name = f"demo-{scenario}-{keys}.svg" if keys else f"demo-{scenario}.svg"
            path = Path(app.save_screenshot(name, str(out)))
        await target.close()
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"), help="folder for the SVGs")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="only these (repeatable)")
    parser.add_argument("--size", default="120x40", help="terminal size COLUMNSxROWS (default %(default)s)")
    parser.add_argument("--keys", default="", help="keys to press before the screenshot, e.g. g (the GPU graphs)")
    args = parser.parse_args()
    try:
        columns, rows = (int(n) for n in args.size.lower().split("x"))
    except ValueError:
        print(f"screenshots: --size {args.size!r} is not COLUMNSxROWS, e.g. 120x40", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for scenario in args.scenario or SCENARIOS:
        path = asyncio.run(screenshot(scenario, out, (columns, rows), args.keys))
        print(f"{scenario}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
