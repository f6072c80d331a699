"""A busy run whose log stays empty: stdout block-buffered into a file (no -u, no PYTHONUNBUFFERED).

It spins the CPU and prints a short step line every half second without flushing;
the 8 KiB buffer takes many minutes to fill, so the file stays silent meanwhile.
"""

import itertools
import time

for step in itertools.count(1):
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        pass
    print(f"step {step} | loss 2.31 | 14.2K tok/s")
