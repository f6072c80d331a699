"""A training loop fed by a DataLoader with two workers; from $SLOW_AT (unix seconds) on, each worker's
__getitem__ sleeps 20 ms (a slow disk, a remote store): the main thread waits on its workers and the
GPU idles. Prints `step N | X tokens/s | loss L` every 20 steps. Input-bound once slowed.
"""

import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

SLOW_AT = float(os.environ.get("SLOW_AT", "0"))
SEQ = 512


class Tokens(Dataset):
    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> torch.Tensor:
        if SLOW_AT and time.time() >= SLOW_AT:
            time.sleep(0.02)
        return torch.randint(0, 32000, (SEQ,))


def train() -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(32000, 1024), torch.nn.Linear(1024, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 32000)).cuda().to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Tokens(), batch_size=16, num_workers=2)
    started, tokens = time.perf_counter(), 0
    for step, batch in enumerate(loader, 1):
        batch = batch.cuda(non_blocking=True)
        loss = model(batch).float().logsumexp(-1).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += batch.numel()
        if step % 20 == 0:
            now = time.perf_counter()
            print(f"step {step} | {tokens / (now - started):.0f} tokens/s | loss {loss.item():.4f}", flush=True)
            started, tokens = now, 0


if __name__ == "__main__":
    train()
