"""A tiny PyTorch Lightning fit with its default TQDM bar (--bar tqdm) or RichProgressBar (--bar rich)."""

import argparse

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--bar", choices=("tqdm", "rich"), required=True)
args = parser.parse_args()


class TinyRegressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = TensorDataset(torch.randn(64_000, 64), torch.randn(64_000))
bar = RichProgressBar() if args.bar == "rich" else TQDMProgressBar()
trainer = pl.Trainer(
    accelerator="gpu", devices=1, max_epochs=10_000, logger=False, enable_checkpointing=False, callbacks=[bar]
)
trainer.fit(TinyRegressor(), DataLoader(data, batch_size=64))
