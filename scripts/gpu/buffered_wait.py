"""A training loop that waits between steps (a slow data service, a rate limit) and prints its step
lines to stdout, run without -u or PYTHONUNBUFFERED into a file: the lines sit in Python's 8 KiB
buffer for about a minute at a time. The loop turns all along; the log looks hung.
"""

import time

import torch

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
step, started = 0, time.perf_counter()
while True:
    for _ in range(10):
        a = (a @ a).clamp_(-1, 1)
    loss = a.float().abs().mean().item()
    step += 1
    print(f"step {step} | loss {loss:.4f} | {step / (time.perf_counter() - started):.2f} it/s")
    time.sleep(0.5)
