"""A training run that progresses: `step N | loss X | 14.2K tok/s`, flushed every --interval seconds.

`--tok-s 5000` makes it slow against a 14,200 baseline; `--loss nan` makes it diverge;
`--steps N` stops writing after N lines and then waits forever, idle (a hang).
Extra arguments (a test's tag) are ignored.
"""

import argparse
import itertools
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--tok-s", type=float, default=14200.0)
parser.add_argument("--loss", default="2.31")
parser.add_argument("--interval", type=float, default=0.2)
parser.add_argument("--steps", type=int, default=0)
args, _ = parser.parse_known_args()

for step in itertools.count(1):
    print(f"step {step} | loss {args.loss} | {args.tok_s / 1000:.1f}K tok/s", flush=True)
    if step == args.steps:
        threading.Event().wait()
    time.sleep(args.interval)
