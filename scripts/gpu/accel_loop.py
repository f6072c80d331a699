"""A tiny training loop under `accelerate launch` with a tqdm bar on the main process."""

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

accelerator = Accelerator()
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(128_000, 256), torch.randn(128_000, 1)), batch_size=64, shuffle=True)
model, optimizer, data = accelerator.prepare(model, optimizer, data)
total = 100_000
bar = tqdm(total=total, desc="train", disable=not accelerator.is_local_main_process)
step = 0
while step < total:
    for x, y in data:
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        bar.update(1)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        if step % 1000 == 0:
            accelerator.print(f"step {step}: loss {loss.item():.4f}")
