"""A run that writes 15 step lines, then works for minutes without a word (an evaluation, a long
epoch with no logging): a Python loop through its own functions, on the CPU. Healthy, and quiet.
Extra arguments are ignored.
"""

import itertools
import time


def batch(i):
    return [(i * k) % 101 for k in range(500)]


def evaluate(values):
    return sum(v * v for v in values) / len(values)


for step in range(1, 16):
    print(f"step {step} | loss 2.0", flush=True)
    time.sleep(0.05)
total = 0.0
for i in itertools.count():
    total += evaluate(batch(i))
    if i % 50 == 0:
        time.sleep(0.01)
