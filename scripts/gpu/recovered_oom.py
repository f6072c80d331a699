"""A loop that looks for the largest batch that fits, as accelerate's find_executable_batch_size and
HF's auto_find_batch_size do: a batch that runs the GPU out of memory is caught, logged with
torch's own message, halved, and tried again; then training goes on and logs its steps. The OOM
lines are real and the run recovers from them: healthy. The process may use a tenth of the GPU
(torch.cuda.set_per_process_memory_fraction), so its search never starves a neighbour.
"""

import logging
import time

import torch

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
log = logging.getLogger("train")
torch.cuda.set_per_process_memory_fraction(0.1)
hidden = 8192
w = torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
batch = 1 << 22  # tokens: 1<<22 x 8192 bf16 activations = 64 GiB, more than its tenth of the GPU
while True:
    try:
        x = torch.randn(batch, hidden, device="cuda", dtype=torch.bfloat16)
        (x @ w).float().mean().backward()
        del x
        torch.cuda.empty_cache()
        break
    except torch.OutOfMemoryError as exc:
        log.warning("batch of %d tokens does not fit, halving: %s", batch, str(exc).splitlines()[0])
        batch //= 2
        torch.cuda.empty_cache()
log.info("training with batch %d", batch)
step, started = 0, time.perf_counter()
while True:
    x = torch.randn(batch // 64, hidden, device="cuda", dtype=torch.bfloat16)
    loss = (x @ w).float().pow(2).mean()
    loss.backward()
    step += 1
    log.info("step %d | loss %.4f | %.1f it/s", step, loss.item(), step / (time.perf_counter() - started))
    time.sleep(0.2)
