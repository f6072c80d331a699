"""A run fed by a data thread through a queue (stdlib only), that turns input-bound after --slow-at s.

The main thread takes a batch from the queue, works on it ~5 ms on the CPU, and prints
`step N | X tokens/s | loss L` (flushed) every 10 steps. From --slow-at seconds on, the producer
thread sleeps --delay s before each batch (a slow disk, a remote store): the main thread waits in
`Queue.get` and the rate falls about tenfold. Extra arguments (a test's tag) are ignored.
"""

import argparse
import queue
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--slow-at", type=float, default=4.0)
parser.add_argument("--delay", type=float, default=0.05)
args, _ = parser.parse_known_args()
started = time.monotonic()
batches = queue.Queue(maxsize=4)


def read_batch(i):
    if time.monotonic() - started >= args.slow_at:
        time.sleep(args.delay)
    return [i] * 512


def produce():
    i = 0
    while True:
        batches.put(read_batch(i))
        i += 1


def train_step(batch):
    deadline = time.perf_counter() + 0.005
    total = 0
    while time.perf_counter() < deadline:
        total += sum(batch[:64])
    return total


threading.Thread(target=produce, name="DataThread", daemon=True).start()
window, tokens, step = time.perf_counter(), 0, 0
while True:
    batch = batches.get()
    train_step(batch)
    step += 1
    tokens += len(batch)
    if step % 10 == 0:
        now = time.perf_counter()
        print(f"step {step} | {tokens / (now - window):.0f} tokens/s | loss 2.0", flush=True)
        window, tokens = now, 0
