"""The pure diagnosis: every verdict from the evidence that should produce it, and the traps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from console.config import Config, MetricsConfig, StallConfig, WarmupConfig
from console.diagnose import (
    DeadThread,
    Evidence,
    ProblemLine,
    StackSummary,
    diagnose,
)
from console.diagnose.rules import DEATH_IS_NEWS_S
from console.model import GpuProcess, GpuReading, LineKind, ProcessReading, ThreadCpu
from console.observe.progress import LIGHTNING_RICH
from console.verdicts import VERDICTS, severity, worse

CONFIG = Config(stall=StallConfig(log_silent_s=300), metrics=MetricsConfig(baseline_tokens_per_s=14200))
OOM_TEXT = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 GiB."


def proc(
    pid=447, cpu=80.0, *, state="S", stdout="pipe:[1234]", unbuffered=True, threads=(), cpu_s=None
) -> ProcessReading:
    return ProcessReading(
        pid=pid,
        ppid=1,
        state=state,
        elapsed_s=12.0,
        threads=18,
        rss_mib=900.0,
        cpu_pct=cpu,
        cmdline="python3 -u hung.py",
        stdout=stdout,
        unbuffered=unbuffered,
        thread_cpu=threads,
        cpu_s=cpu_s,
    )


def gpu(util=90.0, used=21619, pids=(447,)) -> GpuReading:
    return GpuReading(
        index=0,
        uuid="GPU-06eb1f4e-90e3-123f-e50b-b07664ee52f9",
        name="NVIDIA H200",
        memory_used_mib=used,
        memory_total_mib=143771,
        utilization_pct=util,
        temperature_c=38,
        power_w=122.8,
        power_limit_w=700.0,
        processes=tuple(GpuProcess(pid, 21610, "python3") for pid in pids),
    )


#: A run that is alive, busy and progressing at its baseline.
HEALTHY = Evidence(
    window_s=1.5,
    processes=(proc(),),
    gpus=(gpu(),),
    gpu_source="nvidia-smi",
    log_path="/workspace/train.log",
    log_exists=True,
    log_size=40_000,
    log_growth=120,
    log_silent_s=0.0,
    rate_metric="tokens_per_s",
    rate_now=14200.0,
    rate_baseline=14200.0,
    rate_silent_s=1.0,
    rate_interval_s=1.0,
)

#: ps_hung.txt: idle for 12 s, yet ps reports 52.5% CPU (its lifetime average).
HUNG = replace(
    HEALTHY,
    processes=(
        proc(cpu=0.0, cpu_s=6.3, threads=(ThreadCpu(447, "python3", 0.0, "S"), ThreadCpu(449, "python3", 0.0, "S"))),
    ),
    gpus=(gpu(util=0.0),),
    log_growth=0,
    log_silent_s=312.0,
    rate_silent_s=312.0,
)


def test_every_verdict_has_a_severity_and_worse_orders_them():
    assert sorted(VERDICTS, key=severity)[0] == "healthy"
    assert worse("oom", "hung") and worse("hung", "slow") and not worse("healthy", "unknown")


def test_healthy_when_the_log_progresses():
    verdict = diagnose(HEALTHY, CONFIG)
    assert verdict.name == "healthy"
    assert verdict.step is None
    assert any("100% of baseline" in line for line in verdict.evidence)


def test_hung_by_delta_although_ps_says_busy():
    verdict = diagnose(HUNG, CONFIG)
    assert verdict.name == "hung"
    assert verdict.step == "dump"
    assert any(
        line.startswith("pid 447 CPU 0.0% over 1.5 s (ps would say 52.5%: lifetime average)")
        for line in verdict.evidence
    )
    assert "log silent 5m 12s, its rhythm not learned yet (a stall after 5m 00s, set by [stall] log_silent_s)" in verdict.evidence


def test_hung_quotes_the_waiting_threads():
    stacks = (
        StackSummary(447, 447, "MainThread", True, "queue", "Queue.get (queue.py:171) ← pack_hidden (hung.py:9)", main=True),
    )
    verdict = diagnose(replace(HUNG, stacks=stacks), CONFIG)
    assert verdict.name == "hung"
    assert verdict.summary == "the main thread waits on queue in pack_hidden (hung.py:9); quiet 5m 12s"
    assert 'thread "MainThread" waiting on queue: Queue.get (queue.py:171) ← pack_hidden (hung.py:9)' in verdict.evidence


def test_quiet_past_the_floor_is_never_healthy_without_evidence_of_progress():
    """Under the stall limit, past the floor: the log no longer shows progress and no stacks were taken."""
    quiet = replace(HUNG, log_silent_s=200.0, rate_silent_s=200.0)
    verdict = diagnose(quiet, CONFIG)
    assert (verdict.name, verdict.step) == ("unknown", "dump")
    assert verdict.summary == (
        "its log is quiet 3m 20s, its rhythm not learned yet: no evidence of progress; its stacks have not "
        "been taken yet: they tell a loop that waits from one that is frozen"
    )
    assert verdict.next_step.endswith("hung once a stall after 5m 00s, set by [stall] log_silent_s if still idle")


# -- silence against the run's own rhythm ------------------------------------------------------

RHYTHM = Config(metrics=MetricsConfig(baseline_tokens_per_s=14200))  # no [stall] log_silent_s: learned


def test_a_run_that_wrote_every_second_stalls_after_twenty_seconds_of_silence():
    every_second = replace(HUNG, log_write_interval_s=1.0, rate_interval_s=1.0)
    within = diagnose(replace(every_second, log_silent_s=2.0, rate_silent_s=2.0), RHYTHM)
    assert (within.name, within.summary) == ("healthy", "the run is alive and its log progresses")
    quiet = diagnose(replace(every_second, log_silent_s=8.0, rate_silent_s=8.0), RHYTHM)
    assert quiet.name == "healthy"  # past its rhythm, before the floor: said quiet, never "progresses"
    assert quiet.summary == "its log is quiet 8s, usually writes every 1s; the run is alive"
    assert diagnose(replace(every_second, log_silent_s=12.0, rate_silent_s=12.0), RHYTHM).name == "unknown"
    stalled = diagnose(replace(every_second, log_silent_s=21.0, rate_silent_s=21.0), RHYTHM)
    assert stalled.name == "hung"
    assert stalled.summary.endswith("; quiet 21s")
    assert "log silent 21s, usually writes every 1s (a stall after 20s, from its rhythm)" in stalled.evidence


def test_a_fast_writer_is_quiet_after_a_few_of_its_intervals_and_progressing_before():
    fast = replace(HEALTHY, log_growth=0, log_write_interval_s=0.3)
    assert diagnose(replace(fast, log_silent_s=0.6), RHYTHM).summary == "the run is alive and its log progresses"
    assert diagnose(replace(fast, log_silent_s=3.0), RHYTHM).summary.startswith("its log is quiet 3s, usually writes every 0.3s")


def test_a_run_that_logs_rarely_is_judged_by_its_own_rhythm():
    rare = replace(HUNG, log_write_interval_s=60.0, rate_interval_s=60.0, log_silent_s=150.0, rate_silent_s=150.0)
    assert diagnose(rare, RHYTHM).name == "healthy"  # within three of its minutes
    assert diagnose(replace(rare, log_silent_s=600.0, rate_silent_s=600.0), RHYTHM).name == "unknown"
    assert diagnose(replace(rare, log_silent_s=1300.0, rate_silent_s=1300.0), RHYTHM).name == "hung"


def test_without_a_rhythm_the_unlearned_limit_applies_and_an_explicit_limit_wins():
    unlearned = replace(HUNG, rate_interval_s=None)
    assert diagnose(replace(unlearned, log_silent_s=8.0, rate_silent_s=8.0), RHYTHM).name == "healthy"
    assert diagnose(replace(unlearned, log_silent_s=200.0, rate_silent_s=200.0), RHYTHM).name == "unknown"
    assert diagnose(replace(unlearned, log_silent_s=310.0, rate_silent_s=310.0), RHYTHM).name == "hung"
    patient = Config(stall=StallConfig(log_silent_s=1000.0))
    every_second = replace(HUNG, log_write_interval_s=1.0, rate_interval_s=1.0, log_silent_s=100.0, rate_silent_s=100.0)
    assert diagnose(every_second, patient).name == "unknown"  # not stalled, but no evidence of progress


def test_missing_throughput_lines_count_as_silence_even_when_the_log_grows():
    warnings_only = replace(HUNG, log_growth=500, log_silent_s=0.0, rate_silent_s=900.0)
    verdict = diagnose(warnings_only, CONFIG)
    assert verdict.name == "hung"
    assert "last throughput line 15m 00s ago (usually every 1s)" in verdict.evidence


def test_the_stall_the_verdict_sees_is_the_one_the_processes_box_shows():
    """One stall function (console.stall.is_stalled): a log that only warns is stalled for the box as for the verdict."""
    from console.stall import Silence, is_stalled

    warnings_only = replace(HUNG, log_growth=500, log_silent_s=0.0, rate_silent_s=900.0)
    log = Silence(warnings_only.log_silent_s, warnings_only.log_write_interval_s, override_s=CONFIG.stall.log_silent_s)
    assert not log.stalled and is_stalled(log, warnings_only.rate_silent_s, warnings_only.rate_interval_s)
    rare = replace(warnings_only, rate_silent_s=400.0, rate_interval_s=200.0)
    assert not is_stalled(log, rare.rate_silent_s, rare.rate_interval_s) and diagnose(rare, CONFIG).name == "healthy"


def test_a_run_that_reports_rarely_is_not_silent_between_reports():
    rare = replace(HUNG, log_growth=500, log_silent_s=0.0, rate_silent_s=400.0, rate_interval_s=200.0)
    assert diagnose(rare, CONFIG).name == "healthy"


#: A log a block-buffered stdout wrote: ten whole 4 KiB buffers.
BUFFERS_ONLY = replace(HUNG, log_size=10 * 4096)


def test_buffered_when_busy_silent_and_stdout_is_a_block_buffered_file():
    busy = replace(
        BUFFERS_ONLY,
        processes=(
            proc(
                cpu=99.0,
                stdout="/workspace/train.log",
                unbuffered=False,
                threads=(ThreadCpu(447, "python3", 97.0, "R"), ThreadCpu(449, "pt_autograd_0", 1.0, "S")),
            ),
        ),
    )
    verdict = diagnose(busy, CONFIG)
    assert verdict.name == "buffered"
    assert verdict.step == "restart"
    assert "pid 447 stdout → /workspace/train.log, not unbuffered" in verdict.evidence
    assert "pid 447 busy threads: python3 97%" in verdict.evidence


def test_a_log_with_other_writes_than_whole_buffers_is_not_a_buffers_silence():
    """40,000 bytes is no whole number of buffers: something wrote it unbuffered (a flush of its own, stderr)."""
    busy = replace(HUNG, processes=(proc(cpu=99.0, stdout="/workspace/train.log", unbuffered=False),))
    assert diagnose(busy, CONFIG).name == "unknown"
    assert diagnose(replace(busy, log_size=0), CONFIG).name == "buffered"


def test_gpu_busy_alone_counts_as_busy_for_buffered():
    gpu_bound = replace(
        BUFFERS_ONLY, processes=(proc(cpu=1.0, stdout="/workspace/train.log", unbuffered=False),), gpus=(gpu(util=97.0),)
    )
    assert diagnose(gpu_bound, CONFIG).name == "buffered"


def test_busy_and_silent_with_unbuffered_stdout_is_not_called_buffered():
    spinning = replace(HUNG, processes=(proc(cpu=99.0, stdout="/workspace/train.log", unbuffered=True),))
    verdict = diagnose(spinning, CONFIG)
    assert verdict.name == "unknown"
    assert verdict.step == "dump"


# -- progress drawn only on a terminal ----------------------------------------------------------

#: Silent 5m 12s past the limit, no throughput ever logged: the log showed Lightning's RichProgressBar starting.
TERMINAL_ONLY = replace(
    HUNG, rate_metric=None, rate_now=None, rate_silent_s=None, rate_interval_s=None, terminal_only_progress=LIGHTNING_RICH
)


def test_a_run_whose_progress_goes_only_to_a_terminal_is_still_hung_when_idle_and_its_stacks_wait():
    stacks = (StackSummary(447, 447, "MainThread", True, "queue", "Queue.get (queue.py:171) ← fit (train.py:40)", main=True),)
    verdict = diagnose(replace(TERMINAL_ONLY, stacks=stacks), CONFIG)
    assert (verdict.name, verdict.step) == ("hung", "dump")
    assert verdict.summary == "the main thread waits on queue in fit (train.py:40); quiet 5m 12s"
    assert f"no progress reaches the log: {LIGHTNING_RICH.advice}" in verdict.evidence


def test_a_run_whose_progress_goes_only_to_a_terminal_is_healthy_while_it_works_and_hung_when_it_only_spins():
    spinning = replace(TERMINAL_ONLY, processes=(proc(cpu=100.0),))
    busy = diagnose(spinning, CONFIG)
    assert busy.name == "healthy" and busy.next_step == LIGHTNING_RICH.advice
    assert busy.summary == "its progress goes only to a terminal (Lightning RichProgressBar), not to its log; the run is busy"
    in_all_reduce = StackSummary(447, 447, "MainThread", False, "NCCL collective", "all_reduce (distributed_c10d.py:2806)",
                                 main=True, collective="all_reduce")
    assert diagnose(replace(spinning, stacks=(in_all_reduce,)), CONFIG).name == "hung"


def test_an_idle_run_whose_progress_goes_only_to_a_terminal_is_not_said_to_progress_before_the_limit():
    early = diagnose(replace(TERMINAL_ONLY, log_silent_s=6.0), CONFIG)
    assert early.name == "healthy"
    assert early.summary == (
        "its progress goes only to a terminal (Lightning RichProgressBar), not to its log; "
        "the run is alive but not busy; quiet 6s, its rhythm not learned yet"
    )
    assert diagnose(replace(TERMINAL_ONLY, log_silent_s=200.0), CONFIG).name == "unknown"  # the stacks would tell


def test_dead_quotes_the_last_problem_lines():
    problems = (ProblemLine(LineKind.TRACEBACK, "Traceback (most recent call last):"),
                ProblemLine(LineKind.CUDA_ERROR, "torch.AcceleratorError: CUDA error: device-side assert triggered"))
    verdict = diagnose(replace(HEALTHY, processes=(), problems=problems), CONFIG)
    assert verdict.name == "dead"
    assert "cuda_error: torch.AcceleratorError: CUDA error: device-side assert triggered" in verdict.evidence
    assert verdict.evidence[0] == "no process of the run found"


def test_zombies_are_not_alive():
    assert diagnose(replace(HEALTHY, processes=(proc(state="Z"),)), CONFIG).name == "dead"


@pytest.mark.parametrize(
    "change",
    [
        {"log_exists": False, "log_size": 0},
        {"log_size": 0},
        {"launched_at": 1000.0, "log_written_since_launch": False},
    ],
)
def test_launch_failed_when_nothing_alive_and_no_log_since_launch(change):
    verdict = diagnose(replace(HEALTHY, processes=(), **change), CONFIG)
    assert verdict.name == "launch_failed"
    assert verdict.step == "restart"


def test_oom_when_dead_even_if_the_line_is_old():
    problems = (ProblemLine(LineKind.OOM, OOM_TEXT, age_s=5000.0),)
    verdict = diagnose(replace(HEALTHY, processes=(), problems=problems), CONFIG)
    assert verdict.name == "oom"
    assert verdict.evidence[0].startswith("oom (1h 23m ago): torch.OutOfMemoryError")


def test_oom_while_alive_only_when_recent():
    old = replace(HEALTHY, problems=(ProblemLine(LineKind.OOM, OOM_TEXT, age_s=5000.0),))
    recent = replace(HEALTHY, problems=(ProblemLine(LineKind.OOM, OOM_TEXT, age_s=10.0),))
    assert diagnose(old, CONFIG).name == "healthy"
    assert diagnose(recent, CONFIG).name == "oom"


def test_oom_points_at_warmup_when_one_is_configured():
    config = replace(CONFIG, warmup=WarmupConfig(command="python3 warmup.py --gpu {gpu}"))
    dead_oom = replace(HEALTHY, processes=(), problems=(ProblemLine(LineKind.OOM, OOM_TEXT),))
    assert diagnose(dead_oom, config).step == "warmup"
    assert diagnose(dead_oom, CONFIG).step == "restart"


def test_diverged_on_nan_loss():
    verdict = diagnose(replace(HEALTHY, problems=(ProblemLine(LineKind.NAN, "step 7 | loss nan"),)), CONFIG)
    assert verdict.name == "diverged"
    assert "nan: step 7 | loss nan" in verdict.evidence


def test_slow_against_the_baseline():
    verdict = diagnose(replace(HEALTHY, rate_now=5100.0, rate_values=(14200.0,) * 10 + (5100.0,) * 5), CONFIG)
    assert verdict.name == "slow"
    assert verdict.summary.startswith("5.1K tok/s, 64 % below the baseline 14.2K (set in the config)")
    assert verdict.next_step.startswith("look at the cause")


def test_a_config_baseline_is_not_slow_on_one_low_value():
    verdict = diagnose(replace(HEALTHY, rate_now=5100.0, rate_values=(14200.0,) * 10 + (5100.0,)), CONFIG)
    assert verdict.name == "healthy"
    assert "throughput 5,100 tok/s = 36% of baseline 14,200 (set in the config)" in verdict.evidence


def test_a_slowdown_is_learned_from_the_runs_own_log_without_a_config_baseline():
    learned = replace(HEALTHY, rate_baseline=None, rate_now=9100.0, rate_values=(14200.0,) * 40 + (9100.0,) * 8)  # 48 values: the best 24
    verdict = diagnose(learned, CONFIG)
    assert verdict.name == "slow"
    assert verdict.summary.startswith("9.1K tok/s, 36 % below its best sustained 14.2K (its log's best 24 values)")


def test_a_fresh_run_says_no_history_yet_never_healthy_because_nothing_to_compare():
    fresh = replace(HEALTHY, rate_baseline=None, rate_values=(14200.0,) * 6)
    verdict = diagnose(fresh, CONFIG)
    assert "throughput 14,200 tok/s (no history yet: 6 rate values of the 40 a learned baseline needs)" in verdict.evidence


def test_a_healthy_run_in_a_pid_namespace_stays_healthy_and_says_the_gpu_pids_are_unseen():
    namespaced = replace(
        HEALTHY, in_pid_namespace=True, gpus=(gpu(pids=(982211,)),), gpu_contexts_unseen=True
    )
    verdict = diagnose(namespaced, CONFIG)
    assert verdict.name == "healthy"
    assert "GPU memory held by pid 982211: this PID namespace cannot see them (host PIDs)" in verdict.evidence


def test_gpu_contexts_unseen_when_no_run_process_is_in_view_but_gpu_memory_is_held():
    """The container trap: an empty process list in a PID namespace does not mean the contexts are gone."""
    gone = replace(
        HEALTHY, processes=(), in_pid_namespace=True, gpus=(gpu(pids=(982211,)),), gpu_contexts_unseen=True
    )
    verdict = diagnose(gone, CONFIG)
    assert verdict.name == "gpu_contexts_unseen"
    assert "GPU memory held by pid 982211: this PID namespace cannot see them (host PIDs)" in verdict.evidence
    assert "check from the host" in verdict.next_step


def test_unknown_without_any_reading():
    blind = Evidence(window_s=1.5, process_error="permission denied reading /proc")
    assert diagnose(blind, CONFIG).name == "unknown"


def test_unknown_when_alive_without_a_log_to_judge():
    verdict = diagnose(replace(HEALTHY, log_path=None, log_exists=False, log_growth=0, log_silent_s=None,
                               rate_now=None, rate_silent_s=None), CONFIG)
    assert verdict.name == "unknown"
    assert "no log configured" in verdict.evidence


# -- a thread that died ---------------------------------------------------------------------------

DIED = DeadThread("TargetForwardLoop", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB.", 4.0)


def test_a_dead_thread_in_an_idle_live_process_is_hung_not_oom():
    oom_line = ProblemLine(LineKind.OOM, DIED.exception, 4.0, thread="TargetForwardLoop")
    idle = replace(HUNG, log_silent_s=4.0, rate_silent_s=4.0, problems=(oom_line,), dead_threads=(DIED,))
    verdict = diagnose(idle, CONFIG)
    assert verdict.name == "hung"
    assert verdict.summary == 'thread "TargetForwardLoop" died of torch.OutOfMemoryError; the process lives on'
    assert verdict.evidence[0] == f'thread "TargetForwardLoop" died 4s ago: {DIED.exception}'


def test_a_dead_thread_in_a_busy_run_that_still_logs_is_news_then_history():
    """Issue 33: flagged in the header at once (not "healthy" under its red traceback); a run that goes on
    without the thread for a minute is healthy again, the death among its evidence."""
    busy = diagnose(replace(HEALTHY, dead_threads=(DIED,)), CONFIG)
    assert (busy.name, busy.step) == ("unknown", "log")
    assert busy.summary.startswith('thread "TargetForwardLoop" died of torch.OutOfMemoryError 4s ago; its log still progresses')
    went_on = replace(HUNG, log_silent_s=4.0, rate_silent_s=4.0, dead_threads=(replace(DIED, progress_after=True),))
    assert diagnose(went_on, CONFIG).name == "unknown"
    later = diagnose(replace(went_on, dead_threads=(replace(DIED, age_s=DEATH_IS_NEWS_S, progress_after=True),)), CONFIG)
    assert later.name == "healthy"
    assert any('thread "TargetForwardLoop" died 1m' in line and "the log went on" in line for line in later.evidence), later.evidence


def test_a_run_in_a_pid_namespace_keeps_its_gpu_use_by_the_device_reading():
    """Inside a container the driver's per-process PIDs are the host's: none would match the run's."""
    gpu_bound = replace(
        BUFFERS_ONLY,
        in_pid_namespace=True,
        processes=(proc(cpu=1.0, stdout="/workspace/train.log", unbuffered=False),),
        gpus=(replace(gpu(util=97.0, pids=(90447,)), process_sm_pct=((90447, 97.0),)),),
    )
    assert diagnose(gpu_bound, CONFIG).name == "buffered"


# -- ranks ----------------------------------------------------------------------------------------


def rank_thread(n: int, *, wait=None, collective=None, where: str) -> StackSummary:
    """Rank n's main thread (pid 10 + n); a thread without a wait runs at 100 % CPU."""
    pid, cpu = 10 + n, (0.0 if wait else 100.0)
    return StackSummary(pid, pid, "MainThread", wait is not None, wait, where, main=True, signature=(where,),
                        collective=collective, label=f"rank {n} · GPU {n}", role="rank", rank=n, cpu_pct=cpu)


def two_ranks(*threads: StackSummary):
    """A silent two-rank run whose ranks' main threads are `threads`."""
    processes = tuple(replace(proc(t.pid, t.cpu_pct), role="rank", rank=t.rank, label=t.label) for t in threads)
    return replace(HUNG, processes=processes, gpus=(), stacks=threads)


def test_a_rank_saving_a_checkpoint_while_the_others_wait_in_a_barrier_is_not_hung():
    saving = two_ranks(
        rank_thread(0, where="save (torch/serialization.py:900) ← save_checkpoint (train.py:40)"),
        rank_thread(1, wait="NCCL collective", collective="barrier", where="barrier (distributed_c10d.py:4100)"),
    )
    verdict = diagnose(saving, CONFIG)
    assert verdict.name == "unknown"  # busy writing: stacks tell, no rule calls it hung
    assert "rank 1 (pid 11) waits in barrier (NCCL collective) in barrier (distributed_c10d.py:4100)" in verdict.evidence
    assert "rank 0 is the straggler" in verdict.evidence


def test_a_rank_stopped_on_its_own_data_holds_up_a_rank_that_still_spins():
    stuck = two_ranks(
        rank_thread(0, where="compute_loss (trainer.py:2088)"),
        rank_thread(1, wait="I/O", where="read (socket.py:700) ← read_batch (train.py:13)"),
    )
    verdict = diagnose(stuck, CONFIG)
    assert verdict.name == "hung"
    assert verdict.summary.startswith("rank 1 waits on I/O in read_batch (train.py:13); rank 0 cannot finish its step")
    assert "rank 1 is the straggler" in verdict.evidence


def test_a_process_of_one_thread_is_said_in_the_singular():
    one = replace(HEALTHY, processes=(replace(proc(), threads=1),))
    said = "\n".join(diagnose(one, CONFIG).evidence)
    assert "1 thread: python3 -u hung.py" in said and "1 threads" not in said
