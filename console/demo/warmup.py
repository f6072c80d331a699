"""The demo's warmup step: one GPU, one sequence length, a moment of real work, one line of output.

    python -m console.demo.warmup --gpu 0 --seq-len 770

Stands in for a script that autotunes Triton kernels for one shape on one GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m console.demo.warmup", description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    args = parser.parse_args(argv)
    started = time.monotonic()
    kernels = 6 + args.seq_len.bit_length()
    acc = 0.0
    while time.monotonic() - started < 0.05 * kernels / 4:
        acc += sum(math.sqrt(i) for i in range(1000))
    elapsed = time.monotonic() - started
    print(f"warmup gpu {args.gpu} seq_len {args.seq_len}: autotuned {kernels} Triton kernels in {elapsed:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
