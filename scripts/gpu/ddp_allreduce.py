"""A two-rank NCCL all-reduce loop under torchrun; rank --hang-rank blocks in read_batch once
the wall clock passes $HANG_AT (unix seconds), so the other ranks wait in the all-reduce.

On a machine with fewer GPUs than ranks, the ranks share them and use gloo (NCCL refuses two
ranks on one GPU); the hang is the same, rank 0 then waits inside gloo's all_reduce.

--timeout-s N sets the process group's timeout, so the NCCL watchdog fires after N s of the
hang (with TORCH_NCCL_DUMP_ON_TIMEOUT=1 it also writes the flight recorder's dump).
"""

import argparse
import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--hang-rank", type=int, default=1)
parser.add_argument("--timeout-s", type=float, default=0)
args = parser.parse_args()
HANG_AT = float(os.environ.get("HANG_AT", "0"))

rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank % torch.cuda.device_count())
torch.cuda.set_device(device)
extra = {"timeout": timedelta(seconds=args.timeout_s)} if args.timeout_s else {}
if torch.cuda.device_count() >= int(os.environ["WORLD_SIZE"]):
    dist.init_process_group("nccl", device_id=device, **extra)
else:
    dist.init_process_group("gloo", **extra)


def read_batch(step: int) -> torch.Tensor:
    if rank == args.hang_rank and HANG_AT and time.time() >= HANG_AT:
        threading.Event().wait()  # the read never returns (a stuck filesystem, a dead data service)
    return torch.randn(2048, 2048, device=device)


step, started = 0, time.perf_counter()
while True:
    x = read_batch(step)
    y = x @ x
    dist.all_reduce(y)
    torch.cuda.synchronize()
    step += 1
    if rank == 0 and step % 50 == 0:
        rate = step / (time.perf_counter() - started)
        print(f"step {step} | {rate:.1f} it/s | loss {y.abs().mean().item() / 1e4:.4f}", flush=True)
