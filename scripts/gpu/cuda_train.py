"""A real CUDA 'training' loop for the GPU proof: holds GPU memory, runs matmuls, logs throughput.

`--hang` reproduces fixtures/h200/hung.py: a producer thread dies and the main thread
waits on its queue forever while its CUDA context keeps the memory.
"""

import argparse
import queue
import threading
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--hang", action="store_true")
parser.add_argument("--hold-gib", type=float, default=20.0)
args = parser.parse_args()

held = torch.empty(int(args.hold_gib * 1024**3), dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
batches: queue.Queue = queue.Queue()


def producer() -> None:
    time.sleep(0.5)
    if args.hang:
        raise RuntimeError("producer died before publishing")
    while True:
        batches.put(1)
        time.sleep(0.01)


threading.Thread(target=producer, name="TargetForwardLoop", daemon=True).start()
step, loss = 0, 2.31
while True:
    batches.get()
    start = time.perf_counter()
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    step += 1
    loss *= 0.999
    tok_s = 20 * 8192 / (time.perf_counter() - start)
    print(f"step {step} | loss {loss:.4f} | {tok_s / 1000:.1f}K tok/s", flush=True)
