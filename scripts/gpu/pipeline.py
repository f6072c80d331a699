"""The seeds' layout scaled down to two GPUs: one process, a producer thread feeding a queue, a
"target" thread on GPU 0 and a "drafter" thread on GPU 1, and a progress line with tokens/s and loss.

With $HANG_AT set (unix seconds) and --producer-dies, the producer raises at that time
("Exception in thread producer") and the pipeline waits on its queues forever.
"""

import argparse
import os
import queue
import threading
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--producer-dies", action="store_true")
args = parser.parse_args()
HANG_AT = float(os.environ.get("HANG_AT", "0"))
BATCH, SEQ, DIM, VOCAB = 8, 512, 2048, 32_000
batches: queue.Queue = queue.Queue(maxsize=8)
drafts: queue.Queue = queue.Queue(maxsize=8)
results: queue.Queue = queue.Queue()


def producer() -> None:
    while True:
        if args.producer_dies and HANG_AT and time.time() >= HANG_AT:
            raise RuntimeError("producer lost its data source: shard stream closed")
        batches.put(torch.randint(0, VOCAB, (BATCH, SEQ)))


def target() -> None:
    dev = torch.device("cuda", 0)
    emb = torch.randn(VOCAB, DIM, device=dev, dtype=torch.bfloat16) * 0.02
    w = torch.randn(DIM, DIM, device=dev, dtype=torch.bfloat16) * 0.02
    while True:
        ids = batches.get().to(dev, non_blocking=True)
        h = emb[ids]
        for _ in range(6):
            h = torch.nn.functional.gelu(h @ w) + h
        drafts.put(h)


def drafter() -> None:
    dev = torch.device("cuda", 1)
    w = torch.randn(DIM, DIM, device=dev, dtype=torch.bfloat16) * 0.02
    while True:
        h = drafts.get().to(dev)
        for _ in range(2):
            h = torch.nn.functional.gelu(h @ w) + h
        results.put(h.float().pow(2).mean().log().item())


for fn in (producer, target, drafter):
    threading.Thread(target=fn, name=fn.__name__, daemon=True).start()
step, last_t, last_step = 0, time.perf_counter(), 0
while True:
    loss = results.get()
    step += 1
    now = time.perf_counter()
    if now - last_t >= 0.5:
        tokens_s = (step - last_step) * BATCH * SEQ / (now - last_t)
        print(f"step {step} | {tokens_s:.1f} tokens/s | loss {loss:.4f}", flush=True)
        last_t, last_step = now, step
