"""A small MLP trained under torch.compile(mode="max-autotune-no-cudagraphs"): minutes of compiling
(inductor's compile workers, ptxas, the autotuner benchmarking every matmul template) before the
first step, then a step line every few tenths of a second. Healthy throughout: while it compiles
the log is quiet, and the autotuner may log "Runtime error during autotuning … Ignoring this
choice." for templates that ask for more shared memory than the GPU has, and carries on.
"""

import os
import time

import torch

torch.set_float32_matmul_precision("high")
device = torch.device("cuda")
shapes = [(4096, 8192), (8192, 4096), (4096, 11008), (11008, 4096)]


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(i, o, bias=False) for i, o in shapes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x


model = Mlp().to(device, torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
print(f"compiling with max-autotune (pid {os.getpid()})", flush=True)
step, started = 0, time.perf_counter()
while True:
    batch = 256 * (1 + step % 3)  # three batch sizes: three compiles (dynamic=False), more autotuning
    x = torch.randn(batch, shapes[0][0], device=device, dtype=torch.bfloat16)
    loss = compiled(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step += 1
    print(f"step {step} | loss {loss.item():.4f} | {step / (time.perf_counter() - started):.2f} it/s", flush=True)
    time.sleep(0.2)
