"""A forward thread that dies on a real CUDA OOM while the main thread waits on its queue forever.

The thread runs matmuls and hands each step's loss to the main thread, which prints progress;
after --oom-after-s seconds the thread asks for 400 GiB, raises torch.OutOfMemoryError
("Exception in thread TargetForwardLoop"), and the main thread blocks in results.get().
"""

import argparse
import queue
import threading
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--oom-after-s", type=float, default=20.0)
args = parser.parse_args()
results: queue.Queue = queue.Queue()


def forward_loop() -> None:
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    started = time.monotonic()
    while True:
        if time.monotonic() - started >= args.oom_after_s:
            torch.empty((400, 2**30), dtype=torch.uint8, device="cuda")  # 400 GiB: more than the GPU has
        x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
        for _ in range(8):
            x = torch.tanh(x @ w)
        results.put(x.float().pow(2).mean().item())


threading.Thread(target=forward_loop, name="TargetForwardLoop", daemon=True).start()
step, started = 0, time.perf_counter()
while True:
    loss = results.get()
    step += 1
    if step % 100 == 0:
        print(f"step {step} | {step / (time.perf_counter() - started):.1f} it/s | loss {loss:.4f}", flush=True)
