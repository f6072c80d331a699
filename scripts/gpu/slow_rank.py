"""Two ranks under torchrun (gloo when they share a GPU): each step a matmul and an all-reduce. From
$SLOW_AT on, rank $SLOW_RANK (default 1) spends 60 ms more per step on its CPU (a slow augmentation,
an overloaded host): the other rank waits for it in the all-reduce. Rank 0 prints
`step N | X samples/s | loss L` every 20 steps.
"""

import os
import time

import torch
import torch.distributed as dist

SLOW_AT = float(os.environ.get("SLOW_AT", "0"))
rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
slow_rank = int(os.environ.get("SLOW_RANK", "1"))
device = torch.device("cuda", local_rank % torch.cuda.device_count())
torch.cuda.set_device(device)
dist.init_process_group("gloo" if torch.cuda.device_count() < int(os.environ["WORLD_SIZE"]) else "nccl")


def augment(x: torch.Tensor) -> torch.Tensor:
    if SLOW_AT and time.time() >= SLOW_AT and rank == slow_rank:
        deadline = time.perf_counter() + 0.06
        while time.perf_counter() < deadline:
            pass
    return x


w = torch.randn(2048, 2048, device=device)
started, step = time.perf_counter(), 0
while True:
    x = augment(torch.randn(256, 2048, device=device))
    y = (x @ w).relu()
    grad = y.mean(0)
    dist.all_reduce(grad)
    step += 1
    if rank == 0 and step % 20 == 0:
        now = time.perf_counter()
        print(f"step {step} | {20 * 256 / (now - started):.0f} samples/s | loss {grad.abs().mean().item():.4f}", flush=True)
        started = now
