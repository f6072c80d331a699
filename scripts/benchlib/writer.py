"""A log writer for the bench, run as its own process: `python writer.py MODE LOG RATE SECONDS`.

MODE `stamped`: lines at about RATE a second, each starting `T=<time.time() at write>`, one
write per line (so a reader can time write → receipt). MODE `flood`: ~120-byte training-log
lines at RATE a second in a write every 5 ms. Prints how many lines it wrote.
"""

from __future__ import annotations

import os
import random
import sys
import time

LINE_BYTES = 120
FLOOD_TICK_S = 0.005


def pad(text: str) -> bytes:
    return (text + " " * max(0, LINE_BYTES - 1 - len(text)))[: LINE_BYTES - 1].encode() + b"\n"


def flood_lines(count: int = 1000) -> list[bytes]:
    """Training-log lines of ~120 bytes with a throughput, a loss and a step each (the classifier's full path)."""
    return [
        pad(f"2025-06-01 12:{n // 60 % 60:02d}:{n % 60:02d},{n % 1000:03d} INFO trainer: step {n}/500000 | "
            f"loss {2.5 - n / 4000:.4f} | {14.2 - n % 7 / 10:.1f}K tok/s | lr 3.0e-04 | grad_norm {1 + n % 9 / 10:.2f}")
        for n in range(count)
    ]


def stamped(fd: int, rate: float, seconds: float) -> int:
    written, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        written += 1
        os.write(fd, pad(f"T={time.time():.6f} step {written}/500000 | loss 2.3456 | 14.2K tok/s | lr 3.0e-04"))
        time.sleep(random.uniform(0.5, 1.5) / rate)
    return written


def flood(fd: int, rate: float, seconds: float) -> int:
    lines = flood_lines()
    block = b"".join(lines)
    size = len(lines)
    written, started = 0, time.monotonic()
    while True:
        elapsed = min(time.monotonic() - started, seconds)
        due = int(rate * elapsed) - written
        while due > 0:
            at = written % size
            take = min(due, size - at)
            os.write(fd, block[at * LINE_BYTES : (at + take) * LINE_BYTES])
            written += take
            due -= take
        if elapsed >= seconds:
            return written
        time.sleep(FLOOD_TICK_S)


def main(argv: list[str]) -> int:
    mode, log, rate, seconds = argv[0], argv[1], float(argv[2]), float(argv[3])
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    written = (stamped if mode == "stamped" else flood)(fd, rate, seconds)
    os.close(fd)
    print(written, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
