"""A training rank for the fleet tests (a real process under Slurm).

`healthy`: prints throughput every 0.2 s. `hang`: every rank but the last waits forever on a
queue whose producer thread died (as in an all-reduce that never completes); the last rank is
stuck in its data loader. `straggler`: every rank but the last spins in its all-reduce (busy,
as a rank in `torch.cuda.synchronize` is) while the last is stuck in its data loader. All but
`healthy` then print nothing more. `stalls`: prints throughput every 0.2 s for 5 s, then waits
forever, idle (as a rank whose collective never completes): a job that trains, then hangs, each
time it runs.
"""

import os
import queue
import sys
import threading
import time

rank = int(os.environ.get("SLURM_PROCID", "0"))
ranks = int(os.environ.get("SLURM_NTASKS", "1"))
print(f"rank {rank}/{ranks} started", flush=True)


def load_batch() -> None:
    time.sleep(3600)


def all_reduce() -> None:
    while True:
        pass


def wait_for_peers(results: queue.Queue) -> None:
    results.get()


if sys.argv[1] == "healthy":
    step = 0
    while True:
        step += 1
        print(f"rank {rank} step {step} tokens/s: 1000.0 loss 1.50", flush=True)
        time.sleep(0.2)
elif sys.argv[1] == "stalls":
    for step in range(1, 26):
        print(f"rank {rank} step {step} tokens/s: 1000.0 loss 1.50", flush=True)
        time.sleep(0.2)
    threading.Event().wait()
elif rank == ranks - 1:
    load_batch()
elif sys.argv[1] == "straggler":
    os.nice(19)  # the spin is the point, not the CPU it takes from the machine
    all_reduce()
else:
    results: queue.Queue = queue.Queue()
    producer = threading.Thread(target=lambda: 1 / 0, name="producer")
    producer.start()
    producer.join()
    wait_for_peers(results)
