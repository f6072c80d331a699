"""A CUDA loop that logs a step every 0.2 s until $HANG_AT (unix seconds), then launches a kernel that
never ends (it spins on the GPU) and waits for it in torch.cuda.synchronize: GPU 100 % busy, the
main thread stopped in the synchronize, the log silent. Hung.
"""

import os
import time

import torch

HANG_AT = float(os.environ.get("HANG_AT", "0"))
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
step = 0
while True:
    if HANG_AT and time.time() >= HANG_AT:
        torch.cuda._sleep(1 << 62)  # a kernel spinning for ~centuries of GPU cycles
    for _ in range(8):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    step += 1
    print(f"step {step} | loss {a.float().abs().mean().item():.4f}", flush=True)
    time.sleep(0.2)
