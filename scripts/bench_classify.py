"""Lines a second that classify_line (kind and metrics) takes on the bench's flood line mix, and
LineReader.read, which the follower calls for each line (classify_line and the block it continues).

    PYTHONPATH=. python scripts/bench_classify.py

The mix is scripts/benchlib/writer.flood_lines (step, loss, tok/s, lr, grad-norm on each ~120-byte
line), sanitized as the follower does; the figure is CPU time, the best of 5 passes over 50,000
lines, so other work on the machine skews it less. Run it against another checkout's `console`
by putting that checkout first on PYTHONPATH (one without LineReader gives classify_line's figure).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.writer import flood_lines  # noqa: E402

from console.observe import lines  # noqa: E402
from console.observe.textsafe import sanitize  # noqa: E402

PASSES = 5
REPEAT = 50


def rate(texts: list[str], read) -> float:
    best = 0.0
    for _ in range(PASSES):
        started = time.process_time()
        for text in texts:
            read(text)
        best = max(best, len(texts) / (time.process_time() - started))
    return best


def main() -> None:
    texts = [sanitize(line.rstrip(b"\n"))[0] for line in flood_lines()] * REPEAT
    print(f"{rate(texts, lines.classify_line):,.0f} lines/s ({len(texts):,} lines, best of {PASSES})")
    if hasattr(lines, "LineReader"):
        reader = lines.LineReader()
        print(f"{rate(texts, reader.read):,.0f} lines/s through LineReader.read (the follower's call)")


if __name__ == "__main__":
    main()
