"""An unrelated job that keeps its GPU busy with bf16 matmuls, forever (the neighbour of a hung run)."""

import torch

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("busy_gpu: matmuls on", torch.cuda.get_device_name(), flush=True)
while True:
    for _ in range(50):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
