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
import triton.language as tl

parser = argparse.ArgumentParser()
parser.add_argument("--thread", action="store_true")
args = parser.parse_args()


@triton.autotune(
    configs=[
        triton.Config({"BM": 128, "BN": 128, "BK": 128}, num_stages=8, num_warps=8),
        triton.Config({"BM": 128, "BN": 256, "BK": 128}, num_stages=6, num_warps=8),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    M, K = x.shape
    N = y.shape[1]
    out = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    matmul_kernel[grid](x, y, out, M, N, K)
    return out


def warmup(done: queue.Queue) -> None:
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    print("autotuning matmul_kernel for 4096x4096x4096", flush=True)
    done.put(matmul(x, x).float().mean().item())


done: queue.Queue = queue.Queue()
if args.thread:
    threading.Thread(target=warmup, args=(done,), name="TargetWarmup-0", daemon=True).start()
    print("warmup result:", done.get(), flush=True)  # never comes: the warm-up thread died
else:
    warmup(done)
