"""Sequential warmup: the configured command once per (GPU, sequence length), one at a time.

Autotuning Triton kernels for several GPUs at once ran a GPU out of memory; one step at
a time with a shared `TRITON_CACHE_DIR` warms the same cache without that risk. Each step
runs as its own process group (so cancelling stops exactly it), streams its output lines
(sanitized and classified, so an OOM or a traceback stands out), and the warmup stops at
the first step that fails.

The template decides which GPU a step uses: Pulse fills `{gpu}` and `{seq_len}` and sets
nothing else per step (no CUDA_VISIBLE_DEVICES), so write `CUDA_VISIBLE_DEVICES={gpu} python3 …`
or `python3 … --gpu {gpu}` as the script expects. The run's `[run] env` and `cwd` apply.
Pulse quotes the values itself (a placeholder inside the template's own quotes is a config
error), and a command holding control characters runs only once its escaped form is confirmed.

Planned with the target's latest sample, the plan warns of each of its GPUs in use now (memory
held, processes listed, work running: the live run's or another's), so a warmup is not started
unawares beside a run that holds the same GPUs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncGenerator, Collection, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass

from console.actions.audit import (
    ActionRefused,
    AuditLog,
    OutputLine,
    RecordListener,
    StepEvent,
    StepStatus,
    audited,
    checked_seconds,
    refuse_if_read_only,
)
from console.actions.custom import fill_command, shell_path, stream_grouped, unknown_placeholders
from console.actions.shown import HiddenControls, hidden_controls, refuse_unconfirmed
from console.config import Config
from console.model import GpuReading, Sample, run_pids
from console.observe.sampler import IDLE_GPU_MEMORY_MIB
from console.observe.textsafe import sanitize, visible
from console.placeholders import WARMUP_PLACEHOLDERS, placeholder_refusal
from console.remote.target import Target
from console.units import counted, format_duration, format_gib, format_indices


@dataclass(frozen=True, slots=True)
class WarmupStep:
    """One command of the warmup: step `index` (1-based) of the plan."""

    index: int
    gpu: int
    seq_len: int
    command: str

    @property
    def name(self) -> str:
        return f"gpu {self.gpu} seq_len {self.seq_len}"


@dataclass(frozen=True, slots=True)
class WarmupPlan:
    """Exactly what the warmup will run, in order, and where."""

    steps: tuple[WarmupStep, ...]
    triton_cache_dir: str
    cwd: str | None
    env: dict[str, str]
    step_timeout_s: float
    command: str = ""
    """The configured template the steps were filled from."""
    warnings: tuple[str, ...] = ()
    """One line per GPU of the warmup that is in use now (by the live run or another process), or
    why the GPUs could not be read."""

    @property
    def hidden(self) -> tuple[HiddenControls, ...]:
        """The template, when it holds control characters (it then runs only once confirmed escaped)."""
        return hidden_controls([("[warmup] command", self.command)])

    def as_json(self) -> dict:
        return {
            "command": self.command,
            "steps": [
                {"index": s.index, "gpu": s.gpu, "seq_len": s.seq_len, "command": s.command} for s in self.steps
            ],
            "triton_cache_dir": self.triton_cache_dir,
            "cwd": self.cwd,
            "env": self.env,
            "step_timeout_s": self.step_timeout_s,
            "warnings": list(self.warnings),
        }

    def describe(self) -> list[str]:
        """The plan as lines for a confirmation screen or a terminal, the commands escaped."""
        lines = [f"WARNING: {warning}" for warning in self.warnings]
        lines.append(f"warmup: {len(self.steps)} steps, one at a time, TRITON_CACHE_DIR={self.triton_cache_dir}")
        if self.cwd:
            lines.append(f"  in {self.cwd}")
        lines += [f"  {s.index:>3}. $ {s.command}" for s in self.steps]
        return [visible(line) for line in lines] + [hidden.plan_line() for hidden in self.hidden]


def _holders(gpu: GpuReading, run: frozenset[int]) -> str:
    """Who holds memory on `gpu`: the live run's PIDs, then any other process, as the driver lists them."""
    ours = [p.pid for p in gpu.processes if p.pid in run]
    others = [p for p in gpu.processes if p.pid not in run]
    said = [f"the live run (PID {' '.join(map(str, ours))})"] if ours else []
    said += [f"PID {p.pid}" + (f" ({sanitize(p.name, 40)[0]})" if p.name else "") for p in others]
    return f", held by {', '.join(said)}" if said else ""


def busy_gpus(sample: Sample, gpus: Iterable[int], steps: Mapping[int, int]) -> list[str]:
    """A line for each GPU of `gpus` that `sample` shows in use (memory held past the driver's own,
    a process listed on it, or work on it), with its figures and who holds it; `steps`: how many
    warmup steps each GPU gets. When the sample has no GPU readings, one line saying so."""
    if not sample.gpus:
        why = sample.gpu_error or "the target lists no GPU"
        return [f"no GPU readings ({why}): whether the warmup's GPUs are in use cannot be told"]
    by_index = {gpu.index: gpu for gpu in sample.gpus}
    run = run_pids(sample.processes)
    lines = []
    for index in dict.fromkeys(gpus):
        gpu = by_index.get(index)
        if gpu is None:
            lines.append(f"GPU {index} is not among the target's GPUs ({format_indices(list(by_index))})")
            continue
        used, total, busy = gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_pct
        if (used or 0) < IDLE_GPU_MEMORY_MIB and not gpu.processes and not busy:
            continue
        figures = [f"{format_gib(used, unit=False)} of {format_gib(total)}" if used is not None and total
                   else format_gib(used) if used is not None else "memory unknown"]
        if busy is not None:
            figures.append(f"{busy:.0f} % busy")
        lines.append(f"GPU {index} is in use ({', '.join(figures)}{_holders(gpu, run)}):"
                     f" the warmup's {counted(steps[index], 'step')} there would share it")
    return lines


def plan_warmup(config: Config, *, read_only: bool = False, sample: Sample | None = None) -> WarmupPlan:
    """Every (gpu, seq_len) command, GPU-major; ActionRefused when warmup is not configured.

    `sample`: the target's latest sample (GPU readings and the run's processes), when the caller has
    one: the plan warns about each of its GPUs that is in use (`busy_gpus`). None: not looked at."""
    refuse_if_read_only("warmup", read_only)
    warmup = config.warmup
    if not warmup.command:
        raise ActionRefused(f"{config.source}: no [warmup] command configured; add one with {{gpu}} and {{seq_len}}")
    unknown = unknown_placeholders(warmup.command, WARMUP_PLACEHOLDERS)
    if unknown:
        names = ", ".join("{" + name + "}" for name in unknown)
        raise ActionRefused(f"{config.source}: [warmup] command: unknown placeholder {names}; use {{gpu}} {{seq_len}}")
    if why := placeholder_refusal(warmup.command, WARMUP_PLACEHOLDERS):
        raise ActionRefused(f"{config.source}: [warmup] command: {why}")
    if not warmup.gpus or not warmup.seq_lens:
        raise ActionRefused(f"{config.source}: [warmup] needs gpus and seq_lens (lists of integers)")
    steps = tuple(
        WarmupStep(
            index=i,
            gpu=gpu,
            seq_len=seq_len,
            command=fill_command(warmup.command, {"gpu": str(int(gpu)), "seq_len": str(int(seq_len))}),
        )
        for i, (gpu, seq_len) in enumerate(
            ((gpu, seq_len) for gpu in warmup.gpus for seq_len in warmup.seq_lens), start=1
        )
    )
    per_gpu = Counter(step.gpu for step in steps)
    return WarmupPlan(
        steps=steps,
        triton_cache_dir=warmup.triton_cache_dir,
        cwd=config.run.cwd,
        env=dict(config.run.env),
        step_timeout_s=warmup.step_timeout_s,
        command=warmup.command,
        warnings=() if sample is None else tuple(busy_gpus(sample, warmup.gpus, per_gpu)),
    )


def _eta_s(elapsed: list[float], remaining: int) -> float | None:
    return sum(elapsed) / len(elapsed) * remaining if elapsed else None


async def _run_warmup(target: Target, plan: WarmupPlan) -> AsyncGenerator[StepEvent | OutputLine, None]:
    total = len(plan.steps)
    elapsed: list[float] = []
    # TRITON_CACHE_DIR is exported by the wrapper, not by `env`, so that `~` means the target's home.
    prelude = f"export TRITON_CACHE_DIR={shell_path(plan.triton_cache_dir)}; mkdir -p -- \"$TRITON_CACHE_DIR\"; "
    for step in plan.steps:
        label = f"step {step.index}/{total}"
        eta = _eta_s(elapsed, total - step.index + 1)
        eta_text = f" (ETA {format_duration(eta)})" if eta is not None else ""
        data = {"index": step.index, "total": total, "gpu": step.gpu, "seq_len": step.seq_len, "eta_s": eta}
        yield StepEvent(label, StepStatus.RUNNING, f"{step.name}: {visible(step.command)}{eta_text}", data)
        started = time.monotonic()
        result: StepEvent | None = None
        running = stream_grouped(
            target, prelude + step.command, step=label, cwd=plan.cwd, env=plan.env, timeout_s=plan.step_timeout_s
        )
        async with aclosing(running):  # a cancelled warmup stops the step's process group now
            async for event in running:
                if isinstance(event, StepEvent):
                    result = event
                else:
                    yield event
        took = time.monotonic() - started
        elapsed.append(took)
        assert result is not None  # stream_grouped always ends with the step's result
        data = {**data, **result.data, "elapsed_s": took}
        if result.status is not StepStatus.OK:
            yield StepEvent(label, StepStatus.FAILED, f"{step.name} failed: {result.detail}", data)
            for later in plan.steps[step.index :]:
                yield StepEvent(
                    f"step {later.index}/{total}", StepStatus.SKIPPED, f"{later.name}: not run (step {step.index} failed)"
                )
            return
        yield StepEvent(label, StepStatus.OK, f"{step.name} done in {format_duration(took)}", data)


def execute_warmup(
    target: Target, config: Config, plan: WarmupPlan, *, audit: bool = True, confirmed: Collection[str] = (),
    on_record: RecordListener | None = None,
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """Run the plan's steps one after another; stop at the first failure; audited unless `audit`
    is False (--no-audit), each record also told to `on_record`.

    Iterate to run it; stop iterating (or cancel the task) to cancel: the step that is
    running is stopped by its own process group and nothing else is touched.
    ActionRefused at once when the step timeout is not a finite number of seconds ≥ 0, or when
    the template holds control characters and its escaped form is not among `confirmed`
    (console.actions.shown).
    """
    checked_seconds("the warmup's step timeout", plan.step_timeout_s)
    refuse_unconfirmed(plan.hidden, confirmed)
    return audited(
        _run_warmup(target, plan),
        log=AuditLog(config.audit_log, on_record=on_record) if audit else None,
        action="warmup",
        target=target,
        plan=plan.as_json(),
    )
