"""A log writer for the bench, run as its own process: `python writer.py MODE LOG RATE SECONDS`.

MODE `stamped`: lines at about RATE a second, each starting `T=<time.time() at write>`, one
write per line (so a reader can time write → receipt). MODE `flood`: ~120-byte training-log
lines at RATE a second in a write every 5 ms. Prints how many lines it wrote.

What frameworks write, by the real tqdm: MODE `hf` a Hugging Face Trainer's bar redrawn RATE times
a second (`  3%|▎  | 31/1000 [00:03<01:33, 10.3it/s]`) and one of its dicts every 100 steps
(`{'loss': 2.31, 'grad_norm': 1.9, 'learning_rate': 4.9e-05, 'epoch': 0.1}`, via tqdm.write);
MODE `lightning` Lightning's bar (`Epoch 0:  12%|█▏ | 120/1000 [00:12<01:30, 9.8it/s, v_num=0,
train_loss=2.31]`) redrawn RATE times a second; MODE `nccl` two ranks' NCCL INFO start-up (2,000
lines in the first second), then a step line every second.
"""

from __future__ import annotations

import os
import random
import sys
import time

LINE_BYTES = 120
FLOOD_TICK_S = 0.005


def pad(text: str) -> bytes:
    return (text + " " * max(0, LINE_BYTES - 1 - len(text)))[: LINE_BYTES - 1].encode() + b"\n"


def flood_lines(count: int = 1000) -> list[bytes]:
    """Training-log lines of ~120 bytes with a throughput, a loss and a step each (the classifier's full path)."""
    return [
        pad(f"2025-06-01 12:{n // 60 % 60:02d}:{n % 60:02d},{n % 1000:03d} INFO trainer: step {n}/500000 | "
            f"loss {2.5 - n / 4000:.4f} | {14.2 - n % 7 / 10:.1f}K tok/s | lr 3.0e-04 | grad_norm {1 + n % 9 / 10:.2f}")
        for n in range(count)
    ]


def stamped(fd: int, rate: float, seconds: float) -> int:
    written, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        written += 1
        os.write(fd, pad(f"T={time.time():.6f} step {written}/500000 | loss 2.3456 | 14.2K tok/s | lr 3.0e-04"))
        time.sleep(random.uniform(0.5, 1.5) / rate)
    return written


def flood(fd: int, rate: float, seconds: float) -> int:
    lines = flood_lines()
    block = b"".join(lines)
    size = len(lines)
    written, started = 0, time.monotonic()
    while True:
        elapsed = min(time.monotonic() - started, seconds)
        due = int(rate * elapsed) - written
        while due > 0:
            at = written % size
            take = min(due, size - at)
            os.write(fd, block[at * LINE_BYTES : (at + take) * LINE_BYTES])
            written += take
            due -= take
        if elapsed >= seconds:
            return written
        time.sleep(FLOOD_TICK_S)


def bar(fd: int, rate: float, seconds: float, *, lightning: bool) -> int:
    """A tqdm bar into the log, one step every 1/RATE s (so it redraws about RATE times a second)."""
    from tqdm import tqdm

    out = os.fdopen(os.dup(fd), "w", buffering=1)
    steps = int(rate * seconds) + 1
    progress = tqdm(total=100_000, file=out, mininterval=0.5 / rate, desc="Epoch 0" if lightning else None,
                    dynamic_ncols=False, ncols=120)
    for step in range(steps):
        progress.update(1)
        if lightning:
            progress.set_postfix(v_num=0, train_loss=f"{2.5 - step / 4000:.3f}", refresh=False)
        elif step and step % 100 == 0:
            progress.write(f"{{'loss': {2.5 - step / 4000:.4f}, 'grad_norm': 1.9, 'learning_rate': 4.9e-05, "
                           f"'epoch': {step / 1000:.2f}}}", file=out)
        time.sleep(1 / rate)
    progress.close()
    out.close()
    return steps


def nccl(fd: int, rate: float, seconds: float) -> int:
    """NCCL's INFO lines of a start-up (2,000 in the first second), then a step line every 1/RATE s."""
    host = "gpu-box"
    start = [
        f"{host}:{4242 + rank}:{4300 + rank} [{rank}] NCCL INFO Channel {ch:02d}/32 : {rank}[{rank}] -> {1 - rank}[{1 - rank}] "
        f"via P2P/CUMEM/read".encode() + b"\n"
        for n in range(1000) for rank in (0, 1) for ch in (n % 32,)
    ]
    for chunk in range(0, len(start), 100):
        os.write(fd, b"".join(start[chunk : chunk + 100]))
        time.sleep(0.02)
    written, end = len(start), time.monotonic() + seconds
    while time.monotonic() < end:
        written += 1
        os.write(fd, f"step {written} | loss 2.3456 | 14.2K tok/s | lr 3.0e-04\n".encode())
        time.sleep(1 / rate)
    return written


def main(argv: list[str]) -> int:
    mode, log, rate, seconds = argv[0], argv[1], float(argv[2]), float(argv[3])
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    if mode in ("hf", "lightning"):
        written = bar(fd, rate, seconds, lightning=mode == "lightning")
    else:
        written = {"stamped": stamped, "flood": flood, "nccl": nccl}[mode](fd, rate, seconds)
    os.close(fd)
    print(written, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
