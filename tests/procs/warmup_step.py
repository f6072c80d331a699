"""One warmup step for action tests: records when it ran, prints like a warmup, can fail or linger.

    warmup_step.py --gpu G --seq-len L --record FILE [--fail G:L] [--sleep S]

Appends `start G L PID TIME` and `end G L PID TIME` lines to FILE (so a test can prove
steps never overlapped), prints the TRITON_CACHE_DIR it was given, and for the step named
by --fail prints a CUDA out-of-memory traceback to stderr and exits 1.
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, required=True)
parser.add_argument("--seq-len", type=int, required=True)
parser.add_argument("--record", required=True)
parser.add_argument("--fail", default="")
parser.add_argument("--sleep", type=float, default=0.05)
args, _ = parser.parse_known_args()


def record(what: str) -> None:
    with open(args.record, "a") as handle:
        handle.write(f"{what} {args.gpu} {args.seq_len} {os.getpid()} {time.time():.6f}\n")


record("start")
print(f"warming gpu {args.gpu} seq_len {args.seq_len} pid {os.getpid()}", flush=True)
print(f"TRITON_CACHE_DIR={os.environ.get('TRITON_CACHE_DIR')}", flush=True)
time.sleep(args.sleep)
if args.fail == f"{args.gpu}:{args.seq_len}":
    print("Traceback (most recent call last):", file=sys.stderr)
    print(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity"
        " of 139.81 GiB of which 1.06 GiB is free.",
        file=sys.stderr,
        flush=True,
    )
    record("end")
    sys.exit(1)
record("end")
print("autotune done", flush=True)
