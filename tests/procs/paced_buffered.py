"""A loop that waits between steps and prints its step lines without flushing, into a file (no -u,
no PYTHONUNBUFFERED): a little work, a line into the 8 KiB buffer, then 0.3 s of sleep. Idle on the
CPU, its log empty for minutes, its loop turning all along. Extra arguments are ignored.
"""

import itertools
import time


def step(n):
    return sum(i * i for i in range(2000 + n % 7))


for n in itertools.count(1):
    print(f"step {n} | loss {step(n) % 97 / 10:.2f}")
    time.sleep(0.3)
