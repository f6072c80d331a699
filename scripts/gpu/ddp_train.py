"""A healthy DistributedDataParallel loop under torchrun: rank 0 prints a rate line each second."""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank)
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)
model = DistributedDataParallel(
    nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(device), device_ids=[local_rank]
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
batch, total = 256, 1_000_000
step, last_step, last_t = 0, 0, time.perf_counter()
while step < total:
    x = torch.randn(batch, 1024, device=device)
    loss = (model(x) - x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step += 1
    now = time.perf_counter()
    if rank == 0 and now - last_t >= 1.0:
        rate = (step - last_step) / (now - last_t)
        print(f"step {step}/{total} | {rate:.1f} it/s | {rate * batch * 2:.0f} samples/s | loss {loss.item():.4f}", flush=True)
        last_step, last_t = step, now
