"""One rank of a two-rank job in which rank 1 never reaches the all-reduce (stdlib only).

Each rank prints a few step lines, flushed, then rank 0 spins in `all_reduce` (a busy wait on
its peer, as a rank in a real NCCL all-reduce sits at 100 % CPU) and rank 1 blocks in
`read_batch` on a pipe nobody writes. Extra arguments (a test's tag) are ignored.
"""

import os
import time


def all_reduce(peer_arrived):
    while not peer_arrived():
        pass


def read_batch(source):
    return os.read(source, 1)


def main():
    rank = int(os.environ["RANK"])
    for step in range(1, 6):
        print(f"rank {rank} step {step} | loss 2.0", flush=True)
        time.sleep(0.05)
    if rank == 0:
        all_reduce(lambda: False)
    else:
        never_written, _keep_open = os.pipe()
        read_batch(never_written)


if __name__ == "__main__":
    main()
