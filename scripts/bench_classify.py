"""Lines a second that classify_line (kind and metrics) takes on the bench's flood line mix.

    PYTHONPATH=. python scripts/bench_classify.py

The mix is scripts/benchlib/writer.flood_lines (step, loss, tok/s, lr, grad-norm on each ~120-byte
line), sanitized as the follower does; the figure is CPU time, the best of 5 passes over 50,000
lines, so other work on the machine skews it less. Run it against another checkout's `console`
by putting that checkout first on PYTHONPATH.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.writer import flood_lines  # noqa: E402

from console.observe.lines import classify_line  # noqa: E402
from console.observe.textsafe import sanitize  # noqa: E402

PASSES = 5
REPEAT = 50


def main() -> None:
    texts = [sanitize(line.rstrip(b"\n"))[0] for line in flood_lines()] * REPEAT
    best = 0.0
    for _ in range(PASSES):
        started = time.process_time()
        for text in texts:
            classify_line(text)
        best = max(best, len(texts) / (time.process_time() - started))
    print(f"{best:,.0f} lines/s ({len(texts):,} lines, best of {PASSES})")


if __name__ == "__main__":
    main()
