"""A steady GPU training loop (bf16 matmuls, one sync a step) that prints
`step N | X tokens/s | loss L` every 10 steps: the run a neighbour on its GPU slows down.
"""

import time

import torch

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
started, step = time.perf_counter(), 0
while True:
    for _ in range(8):
        a = (a @ w).clamp_(-1, 1)
    loss = a.float().abs().mean().item()
    step += 1
    if step % 10 == 0:
        now = time.perf_counter()
        print(f"step {step} | {10 * 8 * 4096 / (now - started):.0f} tokens/s | loss {loss:.4f}", flush=True)
        started = now
