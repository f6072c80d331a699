"""The seeds' layout scaled down to two GPUs: one process, a producer thread feeding a queue, a
"target" thread on GPU 0 and a "drafter" thread on GPU 1 (GPU 0 too where only one is visible),
and a progress line with tokens/s and loss.

With $HANG_AT set (unix seconds), at that time:
--producer-dies  the producer raises ("Exception in thread producer") and the pipeline waits on
                 its queues forever;
--nan            the drafter's hidden state turns NaN, so the progress line logs `loss nan`;
--target-oom     a "TargetWarmup" thread starts autotuning a Triton matmul on GPU 0, and while it
                 autotunes the target thread asks the CUDA driver for a KV cache larger than the
                 GPU (a real cudaMalloc failure): "Exception in thread target" with
                 torch.OutOfMemoryError, and the drafter and main wait forever.
"""

import argparse
import os
import queue
import threading
import time

import torch

parser = argparse.ArgumentParser()
mode = parser.add_mutually_exclusive_group()
mode.add_argument("--producer-dies", action="store_true")
mode.add_argument("--nan", action="store_true")
mode.add_argument("--target-oom", action="store_true")
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


def autotune_warmup(started: threading.Event) -> None:
    """The Triton warmup of the seeds' run: autotune a matmul over several configs on GPU 0."""
    import triton_warmup  # beside this file; imports Triton only in this mode

    started.set()
    triton_warmup.warmup(torch.device("cuda", 0), seq_len=8192, rounds=3)


def target() -> None:
    dev = torch.device("cuda", 0)
    emb = torch.randn(VOCAB, DIM, device=dev, dtype=torch.bfloat16) * 0.02
    w = torch.randn(DIM, DIM, device=dev, dtype=torch.bfloat16) * 0.02
    while True:
        if args.target_oom and HANG_AT and time.time() >= HANG_AT:
            started = threading.Event()
            threading.Thread(target=autotune_warmup, args=(started,), name="TargetWarmup", daemon=True).start()
            started.wait()
            time.sleep(0.5)  # inside the autotuner's benchmarking
            total = torch.cuda.get_device_properties(dev).total_memory
            torch.empty(int(total * 1.5), dtype=torch.uint8, device=dev)  # the KV cache: more than the GPU has
        ids = batches.get().to(dev, non_blocking=True)
        h = emb[ids]
        for _ in range(6):
            h = torch.nn.functional.gelu(h @ w) + h
        drafts.put(h)


def drafter() -> None:
    dev = torch.device("cuda", min(1, torch.cuda.device_count() - 1))
    w = torch.randn(DIM, DIM, device=dev, dtype=torch.bfloat16) * 0.02
    while True:
        h = drafts.get().to(dev)
        for _ in range(2):
            h = torch.nn.functional.gelu(h @ w) + h
        if args.nan and HANG_AT and time.time() >= HANG_AT:
            h = h * float("nan")
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
