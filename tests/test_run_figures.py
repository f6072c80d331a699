"""What a run's screen says, from its RunState alone (console.ui.run_figures: no Textual, no app)."""

from __future__ import annotations

import subprocess
import sys

from console.diagnose import Verdict
from console.model import GpuProcess, GpuReading, ProcessReading, Sample
from console.stall import Silence
from console.state import RunState
from console.ui.run_figures import (
    LogReading,
    gpu_titles,
    log_titles,
    process_titles,
    status_view,
    throughput_view,
)
from console.verdicts import level as verdict_level
from tests.snapshot_apps.scenarios import NOW, FakeClock, build_state, make_config


def gpu(index: int, *, used: int = 40_000, pids: tuple[int, ...] = (), error: str | None = None) -> GpuReading:
    return GpuReading(index, f"GPU-{index}", "NVIDIA H200", used, 143_771, 97.0, 60.0, 500.0, 700.0,
                      processes=tuple(GpuProcess(pid, 1000) for pid in pids), error=error)


def process(pid: int, *, state: str = "R", nspid: tuple[int, ...] = ()) -> ProcessReading:
    return ProcessReading(pid=pid, ppid=1, state=state, elapsed_s=60.0, threads=8, rss_mib=900.0, cpu_pct=99.0,
                          cmdline="python3 train.py", nspid=nspid)


def test_gpu_titles_say_a_failed_read_a_fault_and_unseen_processes_loudest_first():
    assert gpu_titles(None) == gpu_titles(None, None)
    assert gpu_titles(None).subtitle == "waiting for the first sample"
    failed = gpu_titles(Sample(time=NOW, gpu_error="NVML: driver not loaded"), "node-3")
    assert (failed.title, failed.subtitle, failed.level) == ("GPUs · node-3", "GPU read failed: NVML: driver not loaded", "crit")
    fine = gpu_titles(Sample(time=NOW, gpus=(gpu(0, pids=(7,)), gpu(1, pids=(7,))), gpu_source="nvml", processes=(process(7),)))
    assert (fine.subtitle, fine.level) == ("2 × NVIDIA H200 · nvml", "ok")
    # In a container the driver numbers the run's processes from the host: none of them is seen.
    hidden = Sample(time=NOW, gpus=(gpu(0, pids=(90_001,)),), gpu_source="nvml", processes=(process(7, nspid=(7, 1)),),
                    in_pid_namespace=True)
    assert (gpu_titles(hidden).subtitle, gpu_titles(hidden).level) == ("processes unseen (PID namespace) · 1 × NVIDIA H200 · nvml", "warn")
    faulty = Sample(time=NOW, gpus=(gpu(0, error="Xid 79"),), gpu_source="nvml", processes=(process(7),), in_pid_namespace=True)
    assert gpu_titles(faulty).level == "crit" and "GPU fault" in gpu_titles(faulty).subtitle


def test_process_titles_count_the_living_and_say_when_the_log_grew():
    state = build_state("healthy")
    titles = process_titles(state, Silence(1.0, usual_s=1.0), NOW)
    assert titles.title.startswith("Processes · ") and titles.title.endswith(" alive")
    assert (titles.subtitle, titles.level) == ("log grew just now", "ok")
    stalled = process_titles(state, Silence(1.5, usual_s=1.0, override_s=1.0), NOW)
    assert (stalled.subtitle, stalled.level) == ("log grew 1s ago", "crit")  # never "just now" past the limit
    state.add_sample(Sample(time=NOW, processes=(process(7, state="Z"),)))
    dead = process_titles(state, Silence(None), NOW)
    assert (dead.title, dead.subtitle, dead.level) == ("Processes · 0 alive", "log not read yet", "warn")


def test_log_titles_say_the_filter_search_following_and_problems():
    state = build_state("oom")
    problems = len(state.spans.problems)
    assert problems
    following = log_titles(state, None, LogReading(), extra="lines come every 1s")
    assert following.title == f"Log · {state.log_path}"
    assert following.subtitle == f"following · {problems} problem{'s' if problems > 1 else ''} · n/N jump · lines come every 1s"
    paused = log_titles(state, None, LogReading(filter_text="loss", line_count=12, search_text="nan", following=False, unseen=3))
    assert paused.subtitle.startswith("filter “loss”: 12 lines · search “nan” · n/N · paused · 3 new lines · f to follow")
    one = log_titles(state, None, LogReading(following=False, unseen=1))
    assert "paused · 1 new line · f to follow" in one.subtitle
    assert paused.subtitle.endswith("[/] jump") and paused.level == "warn"
    state.log_path = "/runs/\x1b[31mred"
    assert "\x1b" not in log_titles(state, None, LogReading()).title  # the target's text is never a sequence


def test_status_view_words_the_verdict_and_rounds_the_sample_age_up():
    clock = FakeClock()
    state = build_state("hang", clock)
    verdict = Verdict("hung", "quiet 12 min", [], "look at the stacks", "dump")
    view = status_view(make_config(), state, verdict, read_only=True, now=clock() + 0.2)
    assert (view.host, view.verdict, view.verdict_summary, view.verdict_level) == ("root@10.1.2.6", "hung", "quiet 12 min", "crit")
    assert view.read_only and view.sample_age_s == int(view.sample_age_s or 0) >= 1
    assert status_view(make_config(), state, None, read_only=False, now=clock()).verdict_level == "ok"
    assert [verdict_level(name) for name in ("healthy", "slow", "hung")] == ["ok", "warn", "crit"]


def test_throughput_view_before_any_rate_keeps_the_baseline_and_the_step():
    state = build_state("healthy")
    config = make_config()
    view = throughput_view(state, config.metrics, NOW)
    assert view.unit == "tok/s" and view.current == view.rates[-1] and view.minimum <= view.average
    empty = throughput_view(RunState(clock=FakeClock()), config.metrics, NOW)
    assert (empty.unit, empty.rates, empty.current, empty.step) == (None, (), None, None)
    assert empty.baseline == config.metrics.baseline_tokens_per_s


def test_the_figures_load_without_textual():
    code = "import sys, console.ui.run_figures; sys.exit('textual' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_parts_are_dropped_whole_highest_rank_first_and_rank_zero_never():
    from console.ui.run_figures import kept_parts

    assert kept_parts([10, 5, 5, 5], [0, 1, 2, 1], 25) == (True, True, True, True)
    assert kept_parts([10, 5, 5, 5], [0, 1, 2, 1], 20) == (True, True, False, True)
    assert kept_parts([10, 5, 5, 5], [0, 1, 2, 1], 15) == (True, True, False, False)  # among equals, the last first
    assert kept_parts([10, 5, 5, 5], [0, 1, 2, 1], 3) == (True, False, False, False)


def test_a_narrow_process_table_leaves_columns_out_whole_and_elides_the_role_first():
    from console.ui.run_figures import PROCESS_COLUMNS, elide, process_column_widths

    # mark, PID, role, state, CPU%, RSS, thr, elapsed, command: the widest cells of a table.
    widths = [1, 4, 18, 7, 5, 8, 3, 7, 40]
    keys = [key for _, key in PROCESS_COLUMNS]
    wide = dict(zip(keys, process_column_widths(widths, 120)))
    assert wide == dict(zip(keys, widths))
    at_120 = dict(zip(keys, process_column_widths(widths, 72)))  # 120 columns: the pane's 72 cells
    assert all(at_120[key] == width for key, width in zip(keys[:-1], widths)) and at_120["command"] is None  # 3 cells left
    at_80 = dict(zip(keys, process_column_widths(widths, 42)))  # 80 columns: 42 cells
    assert [key for key in keys if at_80[key] is not None] == ["mark", "pid", "role", "state", "cpu"]
    assert at_80["role"] == 42 - 3 - 6 - 9 - 7 - 2 < 18  # what the figures leave, elided
    assert elide("worker of pid 4127", at_80["role"]) == "worker of pid…"
    assert elide("main", 4) == "main" and elide("a long role name", 8) == ""


def test_a_role_lists_its_gpus_as_runs():
    from console.ui.run_figures import role_cell

    assert role_cell("main · GPU 0,1,2,3,4,5,6,7", (0, 1, 2, 3, 4, 5, 6, 7)) == "main · GPU 0–7"
    assert role_cell("rank 3 · GPU 3", (3,)) == "rank 3 · GPU 3"
    assert role_cell("worker of pid 4127", ()) == "worker of pid 4127"


def test_the_header_elides_the_verdicts_reason_then_shortens_the_link_and_keeps_the_host():
    from console.model import ConnectionStatus
    from console.ui.run_figures import StatusView, header_runs

    def header(width: int, **changes) -> str:
        view = StatusView(host="root@10.1.2.6", container="pct 200", run="dflash-7b", status=ConnectionStatus.CONNECTED,
                          connection="connected", sample_age_s=1, verdict="hung",
                          verdict_summary='thread "TargetForwardLoop" died of RuntimeError; the process lives on', verdict_level="crit")
        import dataclasses

        text = "".join(words for words, _ in header_runs(dataclasses.replace(view, **changes), width))
        assert len(text) <= width or width < 40, text
        return text

    where = " │ ● connected │ sample 1 s ago │ dflash-7b on root@10.1.2.6 · pct 200"
    assert header(200) == ' ◆ hung: thread "TargetForwardLoop" died of RuntimeError; the process lives on' + where
    assert header(100) == ' ◆ hung: thread "TargetForwar…' + where
    assert header(80) == " ◆ hung" + where
    assert header(70, read_only=True) == " ◆ hung │ read-only │ ● │ sample 1 s ago │ root@10.1.2.6 · pct 200"
    failed = header(100, status=ConnectionStatus.RECONNECTING, connection="reconnecting in 4 s: ssh: connect to host 10.1.2.6 port 22: Connection refused")
    assert failed == " ◆ hung │ ○ reconnecting in 4 s: ssh: conne… │ sample 1 s ago │ dflash-7b on root@10.1.2.6 · pct 200"
    assert header(80, verdict=None, verdict_summary="").startswith(" ◆ pulse │ ● connected")


def test_key_hints_wrap_whole_to_the_width():
    from console.ui.run_figures import key_hint_lines

    hints = [("?", "Help"), ("d", "Diagnose"), ("l", "Problem line"), ("q", "Quit"), ("^p", "Palette")]
    assert key_hint_lines(hints, 80) == [hints]
    lines = key_hint_lines(hints, 30)
    assert lines == [hints[:2], hints[2:4], hints[4:]]
    assert [len(" " + "  ".join(f"{key} {does}" for key, does in line)) for line in lines] == [19, 23, 11]
