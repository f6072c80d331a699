#!/usr/bin/env python3
"""Save the `d` screen for a real captured run (tests/data/real) as an SVG, for the README.

    .venv/bin/python scripts/screenshot_diagnosis.py [--scenario torchrun_hang] [--out docs/screenshots] [--size 130x46]

The capture is replayed through the real parsers and the pure diagnosis (tests/real_captures.py),
and the verdict is shown on the console's own diagnosis screen.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.diagnose import diagnose  # noqa: E402
from console.ui.dialogs.diagnosis_screen import DiagnosisScreen  # noqa: E402
from console.ui.themes import ThemedApp  # noqa: E402
from tests.real_captures import Capture  # noqa: E402


async def screenshot(scenario: str, out: Path, size: tuple[int, int]) -> Path:
    capture = Capture(scenario)
    evidence = capture.evidence()
    verdict = diagnose(evidence, capture.config)
    app = ThemedApp()
    path = out / f"diagnosis-{scenario}.svg"
    async with app.run_test(size=size) as pilot:
        app.push_screen(DiagnosisScreen(verdict, evidence))
        await pilot.pause()
        app.save_screenshot(filename=path.name, path=str(out))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="torchrun_hang")
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    parser.add_argument("--size", default="130x46")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.split("x"))
    print(asyncio.run(screenshot(args.scenario, Path(args.out), (width, height))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
