"""A real warmup step: autotune a Triton matmul (valid configs) for one sequence length on one GPU.

    python3 triton_warmup.py --gpu N --seq-len L

The (L × 4096) · (4096 × 4096) fp16 product is autotuned over four configs, then timed; the
autotuner's choice lands in $TRITON_CACHE_DIR. pipeline.py --target-oom imports `warmup`;
triton_oom.py autotunes the same tile over configs too big for the GPU.
"""

from __future__ import annotations

import argparse
import time

import torch
import triton
import triton.language as tl


# One (BM × BN) tile of c = a · b (fp16 out); rows past M are masked, N and K are multiples of the tile.
@triton.jit
def matmul_tile(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=rm[:, None] < M)


def autotuned(configs: list) -> triton.runtime.Autotuner:
    """matmul_tile autotuned over `configs`, keyed on the shape."""
    return triton.autotune(configs=configs, key=["M", "N", "K"])(matmul_tile)


def matmul(kernel: triton.runtime.Autotuner, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x · y with `kernel` (autotuned on its first call for this shape)."""
    (M, K), N = x.shape, y.shape[1]
    out = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    with torch.cuda.device(x.device):
        kernel[grid](x, y, out, M, N, K)
    return out


matmul_kernel = autotuned([
    triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_stages=3, num_warps=4),
    triton.Config({"BM": 128, "BN": 64, "BK": 32}, num_stages=3, num_warps=4),
    triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_stages=3, num_warps=8),
    triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_stages=3, num_warps=8),
])


def warmup(dev: torch.device, seq_len: int, rounds: int = 1) -> float:
    """Autotune and run the (seq_len × 4096) · (4096 × 4096) product `rounds` times; the last run's seconds."""
    x = torch.randn(seq_len, 4096, device=dev, dtype=torch.float16)
    w = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    seconds = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        matmul(matmul_kernel, x, w)
        torch.cuda.synchronize(dev)
        seconds = time.perf_counter() - started
    return seconds


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--seq-len", type=int, required=True)
    args = parser.parse_args()
    first = time.perf_counter()
    warmup(torch.device("cuda", args.gpu), args.seq_len)
    print(f"gpu {args.gpu} seq_len {args.seq_len}: autotuned matmul_kernel in {time.perf_counter() - first:.2f} s, "
          f"best {matmul_kernel.best_config}", flush=True)
