"""A run that logs a step every 0.2 s, then evaluates for a minute without a word (forward passes on
the GPU, a Python loop over batches), then logs its eval loss and trains on. While it evaluates
the log is silent but the run works: healthy, and its stacks move.
"""

import os
import time

import torch

EVAL_AT = float(os.environ.get("HANG_AT", "0"))  # when the evaluation starts (unix seconds)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)


def batch_of(i: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(i)
    return torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16, generator=g)


def evaluate(seconds: float) -> float:
    total, n, end = 0.0, 0, time.time() + seconds
    while time.time() < end:
        total += (batch_of(n) @ w).float().abs().mean().item()
        n += 1
    return total / n


step = 0
while True:
    if EVAL_AT and time.time() >= EVAL_AT:
        EVAL_AT = 0.0
        print(f"eval loss {evaluate(60.0):.4f}", flush=True)
    loss = (batch_of(step) @ w).float().pow(2).mean().item()
    step += 1
    print(f"step {step} | loss {loss:.4f}", flush=True)
    time.sleep(0.2)
