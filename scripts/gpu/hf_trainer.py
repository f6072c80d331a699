"""A tiny GPT-2 trained by the Hugging Face Trainer on random tokens, for tests/data/real.

--mode healthy       trains on; tqdm's bar and the logged dicts go wherever stdout/stderr go.
--mode worker_hang   with --workers 2, every DataLoader worker blocks forever in
                     Dataset.__getitem__ once the wall clock passes $HANG_AT (unix seconds);
                     under torchrun, --hang-rank N limits that to the workers of rank N.
--mode nan           an inf is written into the final layer norm at step 300: the loss turns NaN.
                     --nan-filter keeps the Trainer's default logging_nan_inf_filter (the logged
                     loss stays finite, grad_norm shows the NaN); without it the loss logs as nan.
--mode oom           at step 300 a step asks for 400 GiB of GPU memory: a real CUDA OOM.
"""

import argparse
import os
import threading
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=("healthy", "worker_hang", "nan", "oom"), required=True)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--nan-filter", action="store_true")
parser.add_argument("--fault-step", type=int, default=300)
parser.add_argument("--hang-rank", type=int, default=-1, help="only this rank's workers hang (-1: every rank's)")
cli = parser.parse_args()
HANG_AT = float(os.environ.get("HANG_AT", "0"))
HANGS_HERE = cli.hang_rank < 0 or int(os.environ.get("RANK", "0")) == cli.hang_rank


class RandomTokens(Dataset):
    def __init__(self, n: int, seq: int, vocab: int, hang_at: float) -> None:
        self.n, self.seq, self.vocab, self.hang_at = n, seq, vocab, hang_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if self.hang_at and time.time() >= self.hang_at:
            threading.Event().wait()  # the read never returns, like a read from a dead mount
        ids = torch.randint(0, self.vocab, (self.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


class FaultAtStep(TrainerCallback):
    def on_step_end(self, args, state, control, model=None, **kwargs):
        if cli.mode == "nan" and state.global_step == cli.fault_step:
            with torch.no_grad():
                model.transformer.ln_f.weight.fill_(float("inf"))


class OomTrainer(Trainer):
    def compute_loss(self, model, inputs, *rest, **kw):
        if cli.mode == "oom" and self.state.global_step >= cli.fault_step:
            scratch = torch.empty((400, 2**30), dtype=torch.uint8, device=model.device)  # 400 GiB
            del scratch
        return super().compute_loss(model, inputs, *rest, **kw)


config = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=2048, n_positions=128)
model = GPT2LMHeadModel(config)
dataset = RandomTokens(200_000, 128, config.vocab_size, HANG_AT if cli.mode == "worker_hang" and HANGS_HERE else 0.0)
training = TrainingArguments(
    output_dir=f"/tmp/hf_trainer_{cli.mode}_{os.getpid()}",
    max_steps=100_000,
    per_device_train_batch_size=16,
    learning_rate=3e-4,
    logging_steps=100,
    save_strategy="no",
    report_to="none",
    dataloader_num_workers=cli.workers,
    logging_nan_inf_filter=cli.nan_filter or cli.mode != "nan",
    disable_tqdm=False,
)
trainer = OomTrainer(model=model, args=training, train_dataset=dataset, callbacks=[FaultAtStep()])
trainer.train()
