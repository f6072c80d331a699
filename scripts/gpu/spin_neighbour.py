"""An unrelated job that holds its GPU's SMs with long spinning kernels (torch.cuda._sleep) at little
power: it takes a share of the GPU from its neighbours without driving the GPU to its power limit."""

import torch

print("spin_neighbour: spinning kernels on", torch.cuda.get_device_name(), flush=True)
while True:
    for _ in range(20):
        torch.cuda._sleep(50_000_000)
    torch.cuda.synchronize()
