"""A real warmup step: autotune a Triton matmul (valid configs) for one sequence length on one GPU.

    python3 triton_warmup.py --gpu N --seq-len L

The (L × 4096) · (4096 × 4096) fp16 product is autotuned over four configs, then timed; the
autotuner's choice lands in $TRITON_CACHE_DIR. pipeline.py --target-oom imports `warmup`.
"""

import argparse
import time

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_stages=3, num_warps=4),
        triton.Config({"BM": 128, "BN": 64, "BK": 32}, num_stages=3, num_warps=4),
        triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_stages=3, num_warps=8),
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
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=rm[:, None] < M)


def warmup(dev: torch.device, seq_len: int, rounds: int = 1) -> float:
    """Autotune and run the product `rounds` times; the last run's seconds."""
    dim = 4096
    x = torch.randn(seq_len, dim, device=dev, dtype=torch.float16)
    w = torch.randn(dim, dim, device=dev, dtype=torch.float16)
    out = torch.empty(seq_len, dim, device=dev, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(seq_len, meta["BM"]), triton.cdiv(dim, meta["BN"]))
    seconds = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        with torch.cuda.device(dev):
            matmul_kernel[grid](x, w, out, seq_len, dim, dim)
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
