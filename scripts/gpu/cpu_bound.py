"""A run whose every step prepares its batch on the CPU (Python tokenisation-like work, ~30 ms) and
then trains on the GPU; started pinned to two cores (taskset). From $SLOW_AT the driver pins busy
neighbours to the same cores: the run's threads wait to run (schedstat run delay), its rate falls.
Prints `step N | X tokens/s | loss L` every 10 steps.
"""

import time

import torch


def prepare(step: int) -> torch.Tensor:
    words = [(step * 31 + i * 17) % 32000 for i in range(60_000)]
    return torch.tensor(words[:8192]).view(16, 512)


model = torch.nn.Sequential(torch.nn.Embedding(32000, 512), torch.nn.Linear(512, 32000)).cuda().to(torch.bfloat16)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
started, tokens, step = time.perf_counter(), 0, 0
while True:
    batch = prepare(step).cuda()
    loss = model(batch).float().logsumexp(-1).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step += 1
    tokens += batch.numel()
    if step % 10 == 0:
        now = time.perf_counter()
        print(f"step {step} | {tokens / (now - started):.0f} tokens/s | loss {loss.item():.4f}", flush=True)
        started, tokens = now, 0
