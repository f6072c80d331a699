"""A torch.compile'd model trained on one batch shape, then, from $SLOW_AT on, on a new sequence length
every step (variable-length batches without padding to buckets): dynamo recompiles again and again
(TORCH_LOGS=recompiles prints why), and the rate falls. Prints `step N | X tokens/s | loss L`.
"""

import os
import time

import torch
import torch._dynamo

SLOW_AT = float(os.environ.get("SLOW_AT", "0"))
torch._dynamo.config.cache_size_limit = 256
torch._dynamo.config.automatic_dynamic_shapes = False  # a shape change recompiles, as with mark_static inputs
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
compiled = torch.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
started, tokens, step = time.perf_counter(), 0, 0
while True:
    seq = 128 if not (SLOW_AT and time.time() >= SLOW_AT) else 128 + (step % 97) + 1
    x = torch.randn(8, seq, 1024, device="cuda")
    loss = compiled(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step += 1
    tokens += 8 * seq
    if step % 10 == 0:
        now = time.perf_counter()
        print(f"step {step} | {tokens / (now - started):.0f} tokens/s | loss {loss.item():.4f}", flush=True)
        started, tokens = now, 0
