"""Issue 31 on real runs: a verdict is earned on the default path (no threshold flag), judged by the
evidence of progress, on the nine jobs of tests/data/real/verdicts (one H200, see its README).

Each look of each job is replayed three ways through Pulse's real parsers and its pure diagnosis:
as `pulse check` reads it (the log's tail, its rhythm estimated from the log's size), as a console
that followed the run all along (each line dated by its write), and as a console opened on the run
just then (the whole log read at once, its rhythm estimated from what was read). The verdict must be
the truth every time, with the evidence it rests on.
"""

from __future__ import annotations

import json

import pytest

from console.config import Config, RunConfig
from console.diagnose import Verdict, diagnose, wants_stacks
from console.observe.pyspy import parse_record_raw, thread_motion
from console.observe.recovered import count_text, family_of, reason_of
from console.observe.roles import fold_helpers
from console.stall import QUIET_FLOOR_S, Silence
from tests.real_captures import REAL, Capture

VERDICTS = REAL / "verdicts"
#: (job, look) → the truth, as the job's meta.json says it.
TRUTH = {
    ("hf_loader_hang_start", "at_45"): "hung",
    ("hf_loader_hang_start", "at_75"): "hung",
    ("init_wait", "at_40"): "hung",
    ("init_wait", "at_70"): "hung",
    ("straggler", "at_55"): "hung",
    ("straggler", "at_80"): "hung",
    ("compile_autotune", "at_25"): "healthy",
    ("compile_autotune", "at_50"): "healthy",
    ("compile_autotune", "at_90"): "healthy",
    ("compile_autotune", "at_130"): "healthy",
    ("buffered_wait", "at_45"): "buffered",
    ("buffered_wait", "at_70"): "buffered",
    ("recovered_oom", "at_40"): "healthy",
    ("quiet_eval", "at_50"): "healthy",
    ("quiet_eval", "at_75"): "healthy",
    ("hf_healthy", "at_45"): "healthy",
    ("kernel_hang", "at_140"): "hung",
    ("kernel_hang", "at_165"): "hung",
}
WAYS = ("check", "followed", "opened after the fault")


def look(job: str, at: str, way: str) -> tuple[Verdict, Capture]:
    capture = Capture(f"verdicts/{job}", look=at)
    capture.config = Config(run=RunConfig(log=capture.config.run.log, match=capture.meta["match"]))  # the default path
    evidence = capture.evidence("nvml", timed=way != "check", opened_late=way == "opened after the fault")
    return diagnose(evidence, capture.config), capture


def test_every_look_of_every_job_is_in_the_table():
    looks = {(p.parent.name, p.name) for p in VERDICTS.glob("*/at_*")}
    assert looks == set(TRUTH)
    for job, _ in TRUTH:
        assert Capture(f"verdicts/{job}", look=next(a for j, a in TRUTH if j == job)).meta["truth"].startswith(
            TRUTH[(job, next(a for j, a in TRUTH if j == job))]
        )


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(("job", "at"), sorted(TRUTH))
def test_the_verdict_is_the_truth(job: str, at: str, way: str):
    verdict, _ = look(job, at, way)
    assert verdict.name == TRUTH[(job, at)], f"{verdict.summary}\n" + "\n".join(verdict.evidence)
    if verdict.name == "healthy":
        assert verdict.next_step == "nothing to do"


@pytest.mark.parametrize("way", WAYS)
def test_a_dataloader_hang_before_the_first_step_names_the_workers_frame(way: str):
    verdict, _ = look("hf_loader_hang_start", "at_45", way)
    assert verdict.summary == "the main thread waits on its DataLoader workers (hf_trainer.py:78); quiet 32s"
    assert any(
        line.startswith("2 DataLoader workers of main (pid 1098) blocked on lock/condition wait in Event.wait")
        and "RandomTokens.__getitem__ (hf_trainer.py:42)" in line
        for line in verdict.evidence
    ), verdict.evidence


def test_a_rank_alone_at_init_process_group_names_world_size_and_who_never_joined():
    verdict, _ = look("init_wait", "at_40", "check")
    assert verdict.summary == "rank 0 of 2 waits for peers that never joined, in <module> (ddp_allreduce.py:33); quiet 40s"
    assert (
        "rank 0 waits for its peers in <module> (ddp_allreduce.py:33) at 127.0.0.1:29544 (WORLD_SIZE 2); "
        "ranks in view: 0; never joined here: 1"
    ) in verdict.evidence


def test_a_straggler_is_named_with_its_frame():
    verdict, _ = look("straggler", "at_55", "followed")
    assert verdict.summary == "rank 0 waits in all_reduce; rank 1 is not in it, in read_batch (ddp_allreduce.py:38); quiet 20s"
    assert "rank 1 is the straggler" in verdict.evidence


def test_a_never_ending_kernel_is_hung_with_the_gpu_busy_by_the_run():
    verdict, _ = look("kernel_hang", "at_140", "opened after the fault")
    assert verdict.summary == (
        "the main thread waits in a CUDA synchronize, spinning at 100% CPU, in <module> (kernel_hang.py:19); "
        "GPU 0 is busy with the run's own work: a kernel that does not end; quiet 25s"
    )


def test_a_buffered_loop_that_waits_is_buffered_by_its_stacks_not_its_cpu():
    verdict, capture = look("buffered_wait", "at_45", "check")
    main = next(p for p in capture.samples("nvml")[1].processes if p.pid == 1106)
    assert main.cpu_pct is not None and main.cpu_pct < 5.0  # idle on the CPU: only the stacks tell
    assert verdict.step == "restart"
    assert (
        'thread "MainThread" of main (pid 1106) sleeps in its own loop and wakes (recorded 1 s at 50 Hz): '
        "<module> (buffered_wait.py:18)"
    ) in verdict.evidence
    assert "PYTHONUNBUFFERED=1" in verdict.next_step


@pytest.mark.parametrize("at", ["at_50", "at_75"])
def test_a_quiet_evaluation_is_healthy_because_its_stacks_move(at: str):
    verdict, _ = look("quiet_eval", at, "followed")
    assert "but the run works: main (pid 1105) moves in" in verdict.summary
    assert any(line.startswith('thread "MainThread" of main (pid 1105) moves') for line in verdict.evidence)


def test_compiling_with_autotune_out_of_resource_lines_is_healthy_with_the_skips_counted():
    verdict, _ = look("compile_autotune", "at_25", "check")
    assert verdict.name == "healthy" and verdict.step is None
    assert "3 autotune configs skipped: out of shared memory (the run went on)" in verdict.evidence
    later, _ = look("compile_autotune", "at_130", "check")
    assert any(line.endswith("autotune configs skipped: out of shared memory (the run went on)") for line in later.evidence)


def test_a_recovered_oom_is_a_warning_with_its_line_never_restart():
    verdict, _ = look("recovered_oom", "at_40", "check")
    assert verdict.name == "healthy" and verdict.step is None
    assert any(line.startswith("oom, recovered (progress followed): ") and "CUDA out of memory" in line
               for line in verdict.evidence)


def test_the_compile_workers_are_one_line():
    capture = Capture("verdicts/compile_autotune", look="at_90")
    processes = capture.samples("nvml")[1].processes
    folded = fold_helpers(processes, 5.0)
    assert len(processes) == 18 and len(folded) == 2
    assert folded[1].label == "17 compile workers of pid 1104"
    verdict, _ = look("compile_autotune", "at_90", "check")
    assert sum("[17 compile workers of pid 1104]" in line for line in verdict.evidence) == 1
    assert not any("pid 1550" in line for line in verdict.evidence)  # one of them, folded in


def test_without_stacks_a_quiet_run_is_never_healthy_and_the_stacks_are_wanted():
    """The cheap look (the console every 5 s) has no stacks: past the floor it says so and asks for them."""
    for job, at in TRUTH:
        capture = Capture(f"verdicts/{job}", look=at)
        capture.config = Config(run=RunConfig(log=capture.config.run.log, match=capture.meta["match"]))
        evidence = capture.evidence("nvml", stacks=False, timed=False)
        verdict = diagnose(evidence, capture.config)
        silence = Silence(evidence.log_silent_s, evidence.log_write_interval_s, grew=evidence.log_growth > 0)
        if silence.needs_stacks:
            assert verdict.name != "healthy", (job, at, verdict.summary)
            assert wants_stacks(evidence, capture.config), (job, at)


# -- the parts ---------------------------------------------------------------------------------


def test_silence_progresses_within_its_rhythm_and_needs_stacks_past_the_floor():
    assert Silence(1.0, usual_s=0.3).progressing
    assert not Silence(2.5, usual_s=0.3).progressing and not Silence(2.5, usual_s=0.3).needs_stacks
    assert Silence(QUIET_FLOOR_S, usual_s=0.3).needs_stacks
    assert not Silence(120.0, usual_s=60.0).needs_stacks  # three of its minutes
    assert Silence(9.0).progressing and Silence(10.0).needs_stacks  # no rhythm: the floor
    assert Silence(301.0).stalled and not Silence(299.0).stalled
    assert Silence(3.0, override_s=2.0).stalled and not Silence(3.0, override_s=2.0, grew=True).stalled


RECORD = """py-spy> Sampling process 50 times a second for 1 seconds. Press Control-C to exit.

thread (1105): MainThread;<module> (/w/quiet_eval.py:35);evaluate (/w/quiet_eval.py:23) 32
thread (1105): MainThread;<module> (/w/quiet_eval.py:35);evaluate (/w/quiet_eval.py:23);batch_of (/w/quiet_eval.py:17) 6
thread (1242) 39
py-spy> Wrote raw flamegraph data to '/dev/stdout'. Samples: 77 Errors: 0
"""


def test_a_recording_is_read_thread_by_thread_innermost_frame_first():
    threads = {t.tid: t for t in parse_record_raw(RECORD)}
    main = threads[1105]
    assert (main.name, main.samples, len(main.stacks)) == ("MainThread", 38, 2)
    assert [f.function for f in main.stacks[1][0]] == ["batch_of", "evaluate", "<module>"]
    assert threads[1242].stacks == (((), 39),)


@pytest.mark.parametrize(
    ("job", "at", "pid", "motion"),
    [
        ("quiet_eval", "at_50", 1105, "moving"),
        ("buffered_wait", "at_45", 1106, "paced"),
        ("kernel_hang", "at_140", 2611, "waiting"),
        ("init_wait", "at_40", 1097, "waiting"),
        ("straggler", "at_55", 1239, "waiting"),
    ],
)
def test_each_main_thread_moved_as_the_truth_says(job: str, at: str, pid: int, motion: str):
    capture = Capture(f"verdicts/{job}", look=at)
    dump = capture.dump(pid)
    main = next(t for t in dump.threads if t.name == "MainThread")
    samples = next(t for t in capture.recorded()[pid] if t.tid == main.thread_id)
    assert thread_motion(samples, main, capture.woke().get(main.thread_id), cpu_busy=False) == motion


def test_a_thread_that_never_woke_in_its_own_code_is_still_not_paced():
    capture = Capture("verdicts/buffered_wait", look="at_45")
    main = next(t for t in capture.dump(1106).threads if t.name == "MainThread")
    samples = next(t for t in capture.recorded()[1106] if t.tid == main.thread_id)
    assert thread_motion(samples, main, 0, cpu_busy=False) == "still"
    assert thread_motion(samples, main, 0, cpu_busy=True) == "busy"


def test_the_recoverable_families_are_named_and_counted_from_real_lines():
    autotune = [
        "E1201 20:06:54.861000 1104 torch/_inductor/select_algorithm.py:3924] [0/0] Runtime error during autotuning: ",
        "E1201 20:06:54.861000 1104 torch/_inductor/select_algorithm.py:3924] [0/0] No valid triton configs. "
        "OutOfMemoryError: out of resource: triton_mm Required: 262144 Hardware limit:232448 Reducing block sizes",
        "E1201 20:06:54.861000 1104 torch/_inductor/select_algorithm.py:3924] [0/0] Ignoring this choice.",
    ]
    family = family_of(autotune)
    assert family is not None and count_text(family, 23, reason_of(family, autotune)) == (
        "23 autotune configs skipped: out of shared memory"
    )
    scale = family_of(["[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"])
    assert scale is not None and count_text(scale, 1, None) == "1 fp16 step skipped (loss scale lowered)"
    assert family_of(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB."]) is None


# -- the default path, live on the H200 (tests/data/real/verdicts/live) ---------------------------

LIVE = VERDICTS / "live"


def live_checks() -> dict[tuple[str, str], dict]:
    return {(p.parent.parent.name, p.parent.name): json.loads(p.read_text()) for p in LIVE.glob("*/at_*/check.json")}


def test_pulse_check_live_said_the_truth_on_every_look_but_one():
    checks = live_checks()
    assert set(checks) == set(TRUTH)
    wrong = {look: check["verdict"] for look, check in checks.items() if check["verdict"] != TRUTH[look]}
    assert wrong == {("quiet_eval", "at_75"): "unknown"}


def test_pulse_watch_live_said_the_truth_of_every_job_within_a_dozen_seconds():
    for out in LIVE.glob("*/at_*/watch.out"):
        job, at = out.parent.parent.name, out.parent.name
        said = [line.split(None, 4) for line in out.read_text().splitlines() if ": journal " not in line]
        seconds, verdict = float(said[0][0]), said[0][3].rstrip(":")
        assert verdict == TRUTH[(job, at)] and seconds < 12, (job, said[0])


def test_the_look_that_said_unknown_says_healthy_with_a_second_recording():
    """Live at 75 s the check's one second caught the evaluation's main thread only in its .item(); the
    look's own two seconds caught its other frame too, as the second recording now does."""
    capture = Capture("verdicts/live/quiet_eval", look="at_75")
    capture.config = Config(run=RunConfig(log=capture.config.run.log, match=capture.meta["match"]))
    verdict = diagnose(capture.evidence("nvml", timed=False), capture.config)
    assert verdict.name == "healthy", verdict.summary
    assert "but the run works: main (pid 538) moves in" in verdict.summary
