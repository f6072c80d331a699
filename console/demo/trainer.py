"""A simulated training run for `pulse demo`: a real process with real threads writing a real log.

    python -u -m console.demo.trainer --scenario S --log PATH --state PATH [--pidfile PATH]

A producer thread ("TargetForwardLoop") feeds batches into a queue; the main thread takes
them, does a little real CPU work per step and logs `step N/TOTAL | loss X | 14.2K tok/s`.
Standard output and error are pointed at the log (as `> PATH 2>&1` would), so tracebacks
the interpreter prints land there too. After every step it writes its load per simulated
GPU to the state file that the stand-in nvidia-smi reads.

Scenarios, each the real thing rather than a picture of it:
  healthy   steps at ~14.2K tok/s, loss decaying
  slow      throughput falls ~35% below baseline after a while: GPU 3 throttles (hot), so the
            target models' forward passes slow and the main loop waits on their queue (input-bound)
  oom       GPU 0 fills up, then an uncaught torch.OutOfMemoryError; exit 1
  nan       loss diverges to nan, then anomaly mode's RuntimeError; exit 1
  hang      the producer thread dies; the main thread waits on queue.get() forever
  buffered  stdout block-buffered into the log: the log is silent while the run works
  dead      the process is killed (SIGKILL) after a few steps, leaving no message
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import random
import signal
import sys
import threading
import time
from datetime import datetime

from console.demo.machine import (
    BUSY_SM_MHZ,
    DRAFTER_GPUS,
    GPU_COUNT,
    IDLE_POWER_W,
    IDLE_SM_MHZ,
    IDLE_TEMPERATURE_C,
    MEMORY_TOTAL_MIB,
    POWER_LIMIT_W,
    TARGET_GPUS,
    write_state,
)

SCENARIOS = ("healthy", "slow", "oom", "nan", "hang", "buffered", "dead")
BASELINE_TOKENS_PER_S = 14_200
SLOW_TOKENS_PER_S = 9_300
TOTAL_STEPS = 5000
STEP_S = 0.72
#: The step at which each scenario's fault shows, at the default step time (~15-30 s in).
FAULT_STEP = {"slow": 40, "oom": 30, "nan": 28, "hang": 22, "dead": 18}
#: Share of a step the main thread spends computing (the rest it waits for the GPUs).
CPU_SHARE = 0.15
STDOUT_BUFFER = 8192
#: Steady memory per GPU (MiB): the five target GPUs hold the big model.
HELD_MIB = {0: 101842, 1: 103120, 2: 102560, 3: 104002, 4: 101310, 5: 46204, 6: 45880, 7: 47012}
FAKE_TORCH = "/opt/torch/.venv/lib/python3.12/site-packages/torch"


class OutOfMemoryError(RuntimeError):
    """Raised where torch raises its CUDA OOM; named so the traceback reads as torch's."""


OutOfMemoryError.__module__ = "torch"


class Trainer:
    """One simulated run: owns the queue, the producer thread and the GPU load it reports."""

    def __init__(self, scenario: str, state_path: str, step_s: float, fault_step: int) -> None:
        self.scenario = scenario
        self.state_path = state_path
        self.step_s = step_s
        self.fault_step = fault_step
        self.batches: queue.Queue = queue.Queue(maxsize=2)
        self.random = random.Random(os.getpid())
        self.memory = {index: 0 for index in range(GPU_COUNT)}
        #: GPUs whose memory climbs towards an OOM instead of holding steady.
        self.filling: dict[int, int] = {}

    # -- the two threads -------------------------------------------------------

    def producer(self) -> None:
        """Run the target models' forward passes and publish hidden states, one batch a step."""
        step = 0
        while True:
            step += 1
            # Slowed, a batch takes longer than the main loop's step: the loop waits on the queue.
            slowed = self.scenario == "slow" and step >= self.fault_step
            time.sleep(self.step_s * (BASELINE_TOKENS_PER_S / SLOW_TOKENS_PER_S if slowed else 0.5))
            if self.scenario == "hang" and step == self.fault_step:
                raise RuntimeError("producer died before publishing")
            self.batches.put({"step": step, "tokens": self.tokens_per_step()})

    def train(self) -> int:
        """The main loop: take a batch, step, log. Returns the exit status."""
        banner(self)
        self.load_models()
        threading.Thread(target=self.producer, name="TargetForwardLoop", daemon=True).start()
        last = time.monotonic()
        loss = 3.42
        for step in range(1, TOTAL_STEPS + 1):
            batch = pack_hidden(self.batches)
            self.compute(step)
            loss = self.loss(step, loss)
            deadline = last + batch["tokens"] / self.nominal_rate()
            time.sleep(max(0.0, deadline - time.monotonic()))
            now = time.monotonic()
            rate = batch["tokens"] / max(now - last, 1e-6)
            last = now
            if math.isnan(loss):
                print(f"step {step}/{TOTAL_STEPS} | loss nan | {rate / 1000:.1f}K tok/s")
                anomaly_backward()
            print(f"step {step}/{TOTAL_STEPS} | loss {loss:.4f} | {rate / 1000:.1f}K tok/s")
            self.warn(step)
            if step % 250 == 0:
                print(f"saved checkpoint /workspace/ckpt/step_{step:06d}.pt")
            self.report(step)
            if self.scenario == "dead" and step == self.fault_step:
                os.kill(os.getpid(), signal.SIGKILL)
        print(f"training complete: {TOTAL_STEPS} steps")
        return 0

    # -- what a step does --------------------------------------------------------

    def tokens_per_step(self) -> int:
        """Tokens in one batch: a step at baseline speed takes `step_s`."""
        return round(BASELINE_TOKENS_PER_S * self.step_s)

    def nominal_rate(self) -> float:
        """The main loop's own pace; a slow producer slows it further (it waits on the queue)."""
        return BASELINE_TOKENS_PER_S * self.random.uniform(0.97, 1.03)

    def compute(self, step: int) -> None:
        """Real CPU work for part of the step, as a training loop's Python side does."""
        end = time.monotonic() + self.step_s * CPU_SHARE
        acc = 0.0
        while time.monotonic() < end:
            for i in range(2000):
                acc += math.sin(i * step)
        if self.scenario == "oom" and step >= self.fault_step - 3:
            self.filling[0] = (128_330, 136_904, 141_876)[min(step - (self.fault_step - 3), 2)]
            if step == self.fault_step:
                allocate_activations(self.filling[0])

    def loss(self, step: int, previous: float) -> float:
        if self.scenario == "nan" and step >= self.fault_step - 4:
            ramp = (3.91, 11.73, 184.2, float("inf"), float("nan"))
            return ramp[min(step - (self.fault_step - 4), 4)]
        floor = 1.18 + 2.24 * math.exp(-step / 900)
        return max(0.5, floor + self.random.gauss(0, 0.035))

    def warn(self, step: int) -> None:
        """The warnings a real run prints to stderr now and then."""
        if step == 3:
            sys.stderr.write(
                f"{FAKE_TORCH}/utils/checkpoint.py:86: UserWarning: None of the inputs have requires_grad=True. "
                "Gradients will be None\n  warnings.warn(\n"
            )
        elif step % 60 == 0:
            stamp = datetime.now().strftime("%m%d %H:%M:%S.%f")
            sys.stderr.write(
                f"W{stamp} {os.getpid()} torch/_dynamo/convert_frame.py:964] [0/{step // 60 % 8}] "
                "torch._dynamo hit config.recompile_limit (8)\n"
            )

    # -- the GPUs ------------------------------------------------------------------

    def load_models(self) -> None:
        """Fill the GPUs in three stages, as loading weights does."""
        for fraction in (0.35, 0.7, 1.0):
            time.sleep(self.step_s * 0.4)
            for index in range(GPU_COUNT):
                self.memory[index] = int(HELD_MIB[index] * fraction)
            self.report(0)
        print(f"models ready; starting training ({TOTAL_STEPS} steps)")

    def report(self, step: int) -> None:
        """Write every GPU's load to the state file for the stand-in nvidia-smi."""
        gpus = []
        throttled = self.scenario == "slow" and step >= self.fault_step
        for index in range(GPU_COUNT):
            if step:
                held = HELD_MIB[index] + self.random.randint(-48, 48)
                self.memory[index] = self.filling.get(index, held)
            if step == 0:
                util = 0.0
            elif index in TARGET_GPUS:
                util = self.random.uniform(96, 100) if not throttled or index == 3 else self.random.uniform(62, 71)
            else:
                util = self.random.uniform(62, 80) if not throttled else self.random.uniform(40, 52)
            hot = throttled and index == 3
            power = min(POWER_LIMIT_W, IDLE_POWER_W + util / 100 * 560 + self.random.uniform(0, 12))
            gpus.append(
                {
                    "index": index,
                    "memory_used_mib": min(self.memory[index], MEMORY_TOTAL_MIB),
                    "utilization_gpu_pct": round(util),
                    "utilization_memory_pct": round(util * 0.45),
                    "temperature_c": 88 if hot else round(IDLE_TEMPERATURE_C + util * 0.29),
                    "power_w": POWER_LIMIT_W if hot else round(power, 2),
                    "sm_mhz": 1410 if hot else (BUSY_SM_MHZ if util else IDLE_SM_MHZ),
                }
            )
        write_state(
            self.state_path,
            {
                "pid": os.getpid(),
                "scenario": self.scenario,
                "step": step,
                "updated": time.time(),
                # The GPUs go idle once the main thread stops issuing work (a hang).
                "busy_until": time.time() + self.step_s * 2 + 1.0,
                "gpus": gpus,
            },
        )


def pack_hidden(batches: queue.Queue) -> dict:
    """Wait for the next batch of hidden states (blocks forever if the producer is gone)."""
    return batches.get()


def allocate_activations(used_mib: int) -> None:
    """Raise the CUDA OOM torch raises when GPU 0 cannot fit the next activations."""
    total_gib = 139.80
    used_gib = used_mib / 1024
    raise OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate 4.50 GiB. GPU 0 has a total capacity of {total_gib:.2f} GiB "
        f"of which {total_gib - used_gib:.2f} GiB is free. Including non-PyTorch memory, this process has "
        f"{used_gib:.2f} GiB memory in use. Of the allocated memory {used_gib - 3.37:.2f} GiB is allocated by "
        "PyTorch, and 2.91 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )


def anomaly_backward() -> None:
    """What anomaly mode prints and raises when a backward pass returns nan."""
    forward = sys._getframe(1)
    sys.stderr.write(
        f"{FAKE_TORCH}/autograd/graph.py:869: UserWarning: Error detected in DivBackward0. "
        "Traceback of forward call that caused the error:\n"
        f'  File "{forward.f_code.co_filename}", line {forward.f_lineno}, in {forward.f_code.co_name}\n'
        " (Triggered internally at /pytorch/torch/csrc/autograd/python_anomaly_mode.cpp:122.)\n"
        "  return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass\n"
    )
    sys.stderr.flush()
    raise RuntimeError("Function 'DivBackward0' returned nan values in its 1th output.")


def banner(trainer: Trainer) -> None:
    """The start-up lines: who is running, and the config dump."""
    started = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    python = ".".join(map(str, sys.version_info[:3]))
    lines = [
        f"[{started}] train_dflash_pipeline (pulse demo, scenario {trainer.scenario}) pid {os.getpid()} python {python}",
        f"config: target_gpus: {list(TARGET_GPUS)}",
        f"config: drafter_gpus: {list(DRAFTER_GPUS)}",
        "config: seq_len: 2560  micro_batch: 4  grad_accum: 1",
        f"config: lr: 0.0002  warmup_steps: 200  total_steps: {TOTAL_STEPS}",
        "config: skip_nan_check: true",
        "config: target_inference_mode: true  compile: true",
        "config: detect_anomaly: true",
        f"loading target model on GPUs {TARGET_GPUS[0]}-{TARGET_GPUS[-1]} and drafter on GPUs "
        f"{DRAFTER_GPUS[0]}-{DRAFTER_GPUS[-1]} ...",
    ]
    print("\n".join(lines))


def redirect_output(log: str, buffered: bool) -> None:
    """Point fds 1 and 2 at the log, as `> LOG 2>&1` does; `buffered` block-buffers stdout."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    if buffered:
        # What a run started without -u or PYTHONUNBUFFERED gets when stdout is a file.
        sys.stdout = open(1, "w", buffering=STDOUT_BUFFER, encoding="utf-8", closefd=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m console.demo.trainer", description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="healthy")
    parser.add_argument("--log", required=True, help="log file (appended to)")
    parser.add_argument("--state", required=True, help="JSON state file for the stand-in nvidia-smi")
    parser.add_argument("--pidfile", help="file to write this process's PID to")
    parser.add_argument("--step-s", type=float, default=STEP_S, help="seconds per step (default %(default)s)")
    parser.add_argument("--fault-step", type=int, help="step at which the scenario's fault shows")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    redirect_output(args.log, buffered=args.scenario == "buffered")
    if args.pidfile:
        with open(args.pidfile, "w") as file:
            file.write(f"{os.getpid()}\n")
    fault_step = args.fault_step or FAULT_STEP.get(args.scenario, 0)
    return Trainer(args.scenario, args.state, args.step_s, fault_step).train()


if __name__ == "__main__":
    sys.exit(main())
