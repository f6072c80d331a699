"""A real Triton autotune OutOfResources: every config of the autotuned matmul needs more shared
memory than an H200 has (228 KiB a block), so the autotuner's final launch raises.

--thread runs it in a warm-up thread while the main thread waits on the thread's queue forever
(the thread dies, the process lives on).
"""

import argparse
import queue
import threading

import torch
import triton
from triton_warmup import autotuned, matmul  # beside this file

parser = argparse.ArgumentParser()
parser.add_argument("--thread", action="store_true")
args = parser.parse_args()


# Every config needs more shared memory than an H200 has (228 KiB a block).
matmul_kernel = autotuned([
    triton.Config({"BM": 128, "BN": 128, "BK": 128}, num_stages=8, num_warps=8),
    triton.Config({"BM": 128, "BN": 256, "BK": 128}, num_stages=6, num_warps=8),
])


def warmup(done: queue.Queue) -> None:
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    print("autotuning matmul_kernel for 4096x4096x4096", flush=True)
    done.put(matmul(matmul_kernel, x, x).float().mean().item())


done: queue.Queue = queue.Queue()
if args.thread:
    threading.Thread(target=warmup, args=(done,), name="TargetWarmup-0", daemon=True).start()
    print("warmup result:", done.get(), flush=True)  # never comes: the warm-up thread died
else:
    warmup(done)
