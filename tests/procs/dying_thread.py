"""A run whose producer thread dies while the main loop still has batches: the main thread logs a step
every 0.2 s, the producer dies after --die-after seconds ("Exception in thread Producer:" and its
traceback on stderr), the main loop logs on from what was queued for --then seconds, then waits on the
empty queue forever (a hang on a dead producer). Extra arguments are ignored.
"""

import argparse
import queue
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--die-after", type=float, default=3.0)
parser.add_argument("--then", type=float, default=4.0)
args, _ = parser.parse_known_args()
batches = queue.Queue()
queued = int(args.then / 0.2)


def produce():
    for n in range(queued):
        batches.put(n)
    time.sleep(args.die_after)
    raise RuntimeError("the tokenizer's shard is gone")


threading.Thread(target=produce, name="Producer", daemon=True).start()
step = 0
while True:
    batches.get()
    step += 1
    print(f"step {step} | loss 2.31 | 14.2K tok/s", flush=True)
    time.sleep(0.2)
