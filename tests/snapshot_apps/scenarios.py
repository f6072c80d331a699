"""Pre-filled RunStates for UI tests: one per scenario, built from the H200 captures, on a fake clock.

The GPUs are H200s as the fixtures show them (name, 143771 MiB, 700 W limit); 8 of them,
0–4 `target` and 5–7 `drafter`. Log lines are classified by the real line classifier, and
the problem lines are the real captures (oom.txt, nan_anomaly.txt, hung.log). Nothing here
is random: the same scenario always renders the same screen.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from console.config import Config, GpuConfig, MetricsConfig, RunConfig, TargetConfig
from console.model import (
    ConnectionState,
    ConnectionStatus,
    GpuProcess,
    GpuReading,
    LogLine,
    LogStatus,
    ProcessReading,
    ProgressLine,
    Sample,
)
from console.observe import progress, textsafe
from console.observe.lines import classify_line
from console.observe.roles import label_processes
from console.model import Container
from console.state import RunState

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
SCENARIOS = ("healthy", "slow", "oom", "nan", "hang", "buffered", "dead", "bar")
#: A real HF Trainer log captured on an H200 (tests/data/real/README.md): its tqdm bar and dicts.
HF_TRAINER_LOG = Path(__file__).resolve().parents[1] / "data" / "real" / "hf_healthy" / "run.log"
#: The fake clock's reading (monotonic seconds) when a test starts.
NOW = 50_000.0
#: The target's wall clock at NOW.
TARGET_NOW = 1_760_000_000.0
MAIN_PID = 4127
WORKER_PIDS = (4190, 4191)
LOG_PATH = "/workspace/train_20251009-0412.log"
LAUNCH = "python3 -u /root/train_dflash_pipeline.py --target-gpus 0,1,2,3,4 --drafter-gpus 5,6,7"

# From smi_query_gpu_busy.txt: an H200 as nvidia-smi names it.
H200_NAME = "NVIDIA H200"
H200_TOTAL_MIB = 143771
H200_POWER_LIMIT_W = 700.0
H200_UUID = "GPU-06eb1f4e-90e3-123f-e50b-b07664ee52f9"


class FakeClock:
    """A monotonic clock that only moves when a test moves it."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_config(**run_overrides) -> Config:
    """The DFlash run of the design notes: 5 target GPUs, 3 drafter GPUs, a 14.2K tok/s baseline."""
    run = dict(name="dflash-7b", launch=LAUNCH, log=LOG_PATH, match=r"python3.*train_dflash_pipeline\.py")
    run.update(run_overrides)
    return Config(
        target=TargetConfig(host="root@10.1.2.6", container=Container("pct", "200")),
        run=RunConfig(**run),
        gpus=GpuConfig(roles={**{i: "target" for i in range(5)}, **{i: "drafter" for i in range(5, 8)}}),
        metrics=MetricsConfig(baseline_tokens_per_s=14200),
        source="tests/snapshot_apps/scenarios.py",
    )


def h200(index: int, used_mib: int | None, util: float | None, temp: float, power: float, pids=(), error=None) -> GpuReading:
    return GpuReading(
        index=index,
        uuid=H200_UUID[:-2] + f"{index:02d}",
        name=H200_NAME,
        memory_used_mib=used_mib,
        memory_total_mib=H200_TOTAL_MIB,
        utilization_pct=util,
        temperature_c=temp,
        power_w=power,
        power_limit_w=H200_POWER_LIMIT_W,
        processes=tuple(GpuProcess(pid, mib, "python3") for pid, mib in pids),
        error=error,
    )


def training_gpus(*, busy: bool = True, oom_gpu: int | None = None) -> tuple[GpuReading, ...]:
    gpus = []
    for i in range(8):
        target = i < 5
        used = (121_380 + 1_250 * i) if target else (72_410 + 830 * i)
        if i == oom_gpu:
            used = 143_102
        util = (98.0 - i) if target else 84.0 + i
        temp = (62.0 + 2 * i) if target else 55.0 + i
        power = (640.0 - 9 * i) if target else 410.0 + 7 * i
        if not busy:
            util, temp, power = 0.0, 38.0 + (i % 3), 122.83 + i
        gpus.append(h200(i, used, util, temp, power, pids=((MAIN_PID, used - 610),)))
    return tuple(gpus)


def run_processes(*, main_state: str = "R", main_cpu: float | None = 812.4, worker_cpu: float = 23.5, unbuffered=True) -> tuple[ProcessReading, ...]:
    main = ProcessReading(
        pid=MAIN_PID,
        ppid=1,
        state=main_state,
        elapsed_s=13_262.0,
        threads=143,
        rss_mib=39_117.0,
        cpu_pct=main_cpu,
        cmdline=LAUNCH,
        nspid=(MAIN_PID,),
        stdout=LOG_PATH,
        unbuffered=unbuffered,
        children=WORKER_PIDS,
    )
    workers = tuple(
        ProcessReading(
            pid=pid,
            ppid=MAIN_PID,
            state="S",
            elapsed_s=13_250.0,
            threads=4,
            rss_mib=2_210.0 + n * 17,
            cpu_pct=worker_cpu,
            cmdline=LAUNCH,  # DataLoader workers are forks: their rank's command line
            nspid=(pid,),
        )
        for n, pid in enumerate(WORKER_PIDS)
    )
    return label_processes((main, *workers))


def step_lines(count: int, *, rate_of, start_step: int = 1_000, total: int = 50_000, end_at: float = NOW, every_s: float = 2.0):
    """`count` training lines ending at `end_at` (local clock), one every `every_s` seconds."""
    texts = []
    for n in range(count):
        step = start_step + n * 10
        loss = 2.9 * math.exp(-n / 900) + 0.05 * math.sin(n / 7)
        texts.append((end_at - (count - 1 - n) * every_s, f"step {step}/{total} | loss {loss:.4f} | {rate_of(n) / 1000:.1f}K tok/s | lr 3.0e-04"))
    return texts


def extra(at: float, *texts: str) -> list[tuple[float, str]]:
    return [(at, text) for text in texts]


def fixture_lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def to_log_lines(timed_texts: list[tuple[float, str]]) -> list[LogLine]:
    return [LogLine(number, text, classify_line(text), time=at) for number, (at, text) in enumerate(timed_texts, 1)]


def hf_trainer_lines(now: float) -> tuple[list[tuple[float, str]], ProgressLine]:
    """The real HF Trainer capture's lines over its 75 s, and its bar's last complete redraw, drawn just now."""
    raw = HF_TRAINER_LOG.read_bytes()
    complete, _, partial = raw.rpartition(b"\n")
    lines = [textsafe.sanitize(line)[0] for line in complete.split(b"\n")]
    timed = [(now - 75 + 75 * n / len(lines), text) for n, text in enumerate(lines)]
    return timed, progress.progress_line(textsafe.sanitize(partial[: partial.rfind(b"\r")])[0], now - 0.1)


def healthy_rate(n: int) -> float:
    return 14_050 + 260 * math.sin(n / 5) + 90 * math.cos(n / 2.3)


#: The slow scenario's rate falls this long before NOW (its 81st of 160 lines, 2 s apart).
SLOW_FOR_S = 160.0
#: H200's highest SM clock (clocks.max.sm in smi_query_gpu_busy.txt).
H200_SM_MHZ = 1980.0


def gpu_history(gpus: tuple[GpuReading, ...], seconds: int, *, slow_for_s: float | None) -> list[tuple[float, tuple[GpuReading, ...]]]:
    """`gpus` read once a second for `seconds` up to TARGET_NOW, each with its SM clock: steady, then for the
    last `slow_for_s` seconds (an input-bound slowdown) busy in bursts, at lower power, while the clock holds."""
    history = []
    for n in range(seconds):
        at = TARGET_NOW - (seconds - 1 - n)
        slow = slow_for_s is not None and at > TARGET_NOW - slow_for_s
        readings = []
        for gpu in gpus:
            wave = math.sin(n / 3 + gpu.index)
            util = (55.0 + 35 * wave) if slow else (gpu.utilization_pct or 0.0) - abs(wave)
            power = (330.0 + 120 * wave) if slow else (gpu.power_w or 0.0) + 8 * wave
            readings.append(replace(gpu, utilization_pct=round(util), power_w=round(power, 1), sm_clock_mhz=H200_SM_MHZ - 15 * (n % 3)))
        history.append((at, tuple(readings)))
    return history


def build_state(scenario: str, clock: FakeClock | None = None, *, gpu_seconds: int = 0) -> RunState:
    """A RunState as a monitor would have filled it for `scenario` (see SCENARIOS); `gpu_seconds`: that many
    seconds of samples before the last (gpu_history), the GPU pane's graphs."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    clock = clock or FakeClock()
    state = RunState(clock=clock)
    state.log_path = LOG_PATH
    now = clock.now
    silent_s = 1.0
    gpus = training_gpus()
    processes = run_processes()

    texts = extra(now - 620, "[rank0] loading checkpoint /workspace/ckpt/step_990.pt", "UserWarning: TypedStorage is deprecated")
    if scenario == "healthy":
        texts += step_lines(160, rate_of=healthy_rate)
    elif scenario == "slow":
        texts += step_lines(160, rate_of=lambda n: healthy_rate(n) * (1.0 if n < 80 else 0.66))
    elif scenario == "oom":
        texts += step_lines(120, rate_of=healthy_rate, end_at=now - 40)
        texts += extra(now - 38, *fixture_lines("oom.txt"))
        gpus, processes, silent_s = training_gpus(oom_gpu=2), (), 38.0
    elif scenario == "nan":
        texts += step_lines(120, rate_of=healthy_rate, end_at=now - 20)
        texts += extra(now - 18, *fixture_lines("nan_anomaly.txt"))
        silent_s = 18.0
    elif scenario == "hang":
        texts += step_lines(120, rate_of=healthy_rate, end_at=now - 730)
        texts += extra(now - 728, *fixture_lines("hung.log")[1:])
        gpus = training_gpus(busy=False)
        processes = run_processes(main_state="S", main_cpu=0.0, worker_cpu=0.0)
        silent_s = 728.0
    elif scenario == "buffered":
        texts += step_lines(40, rate_of=healthy_rate, end_at=now - 905)
        processes = run_processes(main_cpu=99.6, unbuffered=False)
        silent_s = 905.0
    elif scenario == "bar":
        texts, bar = hf_trainer_lines(now)
    elif scenario == "dead":
        texts += step_lines(120, rate_of=healthy_rate, end_at=now - 300)
        texts += extra(now - 299, "Killed")
        gpus = tuple(h200(i, 0, 0.0, 36.0 + i % 3, 71.0 + i, pids=()) for i in range(8))
        processes, silent_s = (), 299.0

    state.add_lines(to_log_lines(texts))
    if scenario == "bar":
        state.set_progress(bar)
    history = gpu_history(gpus, gpu_seconds, slow_for_s=SLOW_FOR_S if scenario == "slow" else None)
    for at, readings in history[:-1]:
        state.add_sample(Sample(time=at, gpus=readings, gpu_source="nvml", processes=processes))
    state.add_sample(
        Sample(
            time=TARGET_NOW,
            gpus=history[-1][1] if history else gpus,
            gpu_source="nvml",
            processes=processes,
            # A block-buffered stdout writes whole 4 KiB buffers: the buffered run's log is 2,176 of them.
            log=LogStatus(LOG_PATH, True, size=2176 * 4096 if scenario == "buffered" else 8_912_331,
                          mtime=TARGET_NOW - silent_s, inode=1_311_877),
        )
    )
    state.last_sample_at = now - 0.8
    state.set_connection(ConnectionState(ConnectionStatus.CONNECTED, detail=""))
    return state


def make_app(scenario: str = "healthy", *, theme: str | None = None, read_only: bool = False, target=None, config=None,
             gpu_seconds: int = 0):
    """A PulseApp over `scenario`'s state with no live source, on a fake clock (app.clock), no animations."""
    from console.ui.app import PulseApp

    clock = FakeClock()
    app = PulseApp(
        config or make_config(),
        build_state(scenario, clock, gpu_seconds=gpu_seconds),
        target=target,
        read_only=read_only,
        clock=clock,
        theme=theme,
    )
    app.animation_level = "none"
    record_notices(app)
    return app


def record_notices(app) -> list:
    """Every notification `app` shows from now on, as Textual's Notification (message, title,
    severity), in `app.notices`: through the app's public notify, which screens and widgets call too."""
    from textual.notifications import Notification

    notices: list[Notification] = []
    show = app.notify

    def notify(message: str, *, title: str = "", severity="information", timeout=None, markup: bool = True) -> None:
        notices.append(Notification(message, title, severity, timeout if timeout is not None else 5, markup))
        show(message, title=title, severity=severity, timeout=timeout, markup=markup)

    app.notify = notify
    app.notices = notices
    return notices


def diagnosed(app) -> None:
    """Give `app` the verdict its cheap diagnosis reaches on its scenario's state (the header shows it)."""
    from console.diagnose import diagnose
    from console.evidence import from_samples

    state = app.state
    app.set_verdict(diagnose(from_samples(state.samples[0], state.samples[-1], app.config, state, timed=False), app.config))


async def select_process(app, pilot, reading: ProcessReading):
    """Add `reading` to the latest sample and select its row in the focused process table (returned)."""
    import time

    from console.ui.panes.process_pane import ProcessPane

    app.state.add_sample(Sample(time=time.time(), processes=(*app.state.latest.processes, reading)))
    app.run_screen.refresh_panes()
    await pilot.pause()
    table = app.query_one(ProcessPane)
    table.focus()
    table.select_pid(reading.pid)
    return table


def launched_twice():
    """The process trees a restart's match finds when the run was launched twice: the run (its ranks'
    workers, GPU memory, the log) and a second copy started by hand an hour later, holding nothing yet."""
    from console.actions.guards import choose_tree, log_glob, process_trees, tree_facts

    copy = ProcessReading(pid=20_913, ppid=1, state="S", elapsed_s=3_412.0, threads=12, rss_mib=1_840.0, cpu_pct=0.0,
                          cmdline=LAUNCH, stdout="/dev/pts/3")
    trees = process_trees((*run_processes(), copy))
    facts = [tree_facts(tree, training_gpus(), log_glob(LOG_PATH), None) for tree in trees.values()]
    return choose_tree(facts, None, False).trees
