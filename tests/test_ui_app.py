"""Pilot tests of the console: keys, follow/pause, problem jumps, filter, themes, connection, read-only."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console
from rich.text import Text

from textual.widgets import Input

from console.config import WarmupConfig
from console.model import ConnectionState, ConnectionStatus, LogLine, Sample
from console.observe.lines import classify_line
from console.remote.target import LocalTarget
from console.ui.panes.gpu_pane import GpuPane
from console.ui.dialogs.help_screen import HelpScreen
from console.ui.panes.log_pane import LogPane
from console.ui.panes.process_pane import ProcessPane
from console.ui.panes.status_bar import StatusBar
from console.ui.panes.throughput_pane import ThroughputPane
from console.observe.textsafe import sanitize
from tests.real_captures import REAL
from tests.snapshot_apps.scenarios import NOW, h200, make_app, make_config, run_processes

SIZE = (120, 40)


def status_text(app) -> str:
    return str(app.query_one(StatusBar).render())


def add_lines(app, texts: list[str]) -> None:
    first = app.state.lines_received + 1
    app.state.add_lines(LogLine(first + i, text, classify_line(text), time=NOW) for i, text in enumerate(texts))


async def test_help_opens_and_closes_and_q_quits():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        console = Console(width=120, record=True, file=io.StringIO())
        console.print(app.screen.query_one("Static").content)
        shown = console.export_text()
        assert "Next problem: OOM" in shown and "Pause or resume following" in shown and "PgUp PgDn" in shown
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
    assert app.return_code == 0


async def test_unwired_actions_are_hidden_and_their_keys_do_nothing():
    app = make_app()  # no target: nothing can act on the run
    async with app.run_test(size=SIZE) as pilot:
        assert {"diagnose", "dump", "restart", "warmup"}.isdisjoint(spec.action for spec in app.action_specs)
        footer_keys = {binding.key for _, binding, enabled, _ in app.screen.active_bindings.values() if enabled}
        assert "R" not in footer_keys and "d" not in footer_keys
        await pilot.press("R", "d")
        assert app.screen is app.screen_stack[0]


async def test_follow_pauses_counts_new_lines_and_resumes():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPane)
        assert log.following and log.scroll_y == log.max_scroll_y
        await pilot.press("f")
        assert not log.following
        add_lines(app, [f"step {9000 + i} | loss 1.0 | 14.1K tok/s" for i in range(37)])
        app.run_screen.flush_log()
        await pilot.pause()
        assert log.unseen == 37
        assert "37 new lines" in app.query_one("#log-box").border_subtitle
        top = log.scroll_y
        assert top < log.max_scroll_y
        await pilot.press("f")
        await pilot.pause()
        assert log.following and log.unseen == 0
        assert log.scroll_y == log.max_scroll_y
        assert "following" in app.query_one("#log-box").border_subtitle


async def test_f_retitles_the_log_in_its_own_handler_and_mounts_no_toast():
    """Under a flood every message hop waits behind the log's work: the key's effect (the title) is set
    by the key's handler itself, and no toast (a layout of the whole screen) goes up on top."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        box = app.query_one("#log-box")
        app.run_screen.action_toggle_follow()
        assert "paused" in box.border_subtitle  # before any message has been processed
        app.run_screen.action_toggle_follow()
        assert "following" in box.border_subtitle
        await pilot.pause()
        assert not app.query("Toast")


async def test_scrolling_up_pauses_and_scrolling_to_the_end_follows_again():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPane)
        await pilot.press("pageup")
        assert not log.following
        add_lines(app, ["step 1 | loss 1.0"] * 5)
        app.run_screen.flush_log()
        assert log.unseen == 5
        await pilot.press("end")
        await pilot.pause()
        assert log.following and log.unseen == 0


async def test_n_and_N_jump_between_problems():
    """The OOM's traceback is one problem, named by its exception line: `n` lands there, not on "Traceback"."""
    app = make_app("oom")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        (oom,) = [line for line in log.shown_lines if line.info.kind.value == "oom"]
        assert oom.text.startswith("torch.OutOfMemoryError: CUDA out of memory.")
        await pilot.press("home")
        await pilot.press("n")
        assert log.current_line == oom.number
        assert not log.following
        await pilot.press("n")  # none below: stays, says so
        assert log.current_line == oom.number
        assert any("no problem below" in n.message for n in app.notices)
        await pilot.press("N")  # the traceback's first line is the same problem: none above
        assert log.current_line == oom.number
        assert any("no problem above" in n.message for n in app.notices)
        first_visible = int(log.scroll_y)
        visible = [line.number for line in log.shown_lines[first_visible : first_visible + log.size.height]]
        assert oom.number in visible and oom.number - 2 in visible  # its frames and "Traceback" above it


#: What names each problem of the real torchrun watchdog capture, in the log's order.
WATCHDOG_PROBLEMS = [
    "[rank0]:[E1130 10:50:10.362783985 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout",
    "[rank1]:[E1130 10:50:14.587908521 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal",
    "[rank0]:[E1130 10:50:14.193021541 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal",
    "[rank0]:[E1130 10:51:14.807947605 ProcessGroupNCCL.cpp:750] [Rank 0] Some NCCL operations have failed or timed out",
    "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
    "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception",
    "E1130 10:51:14.894000 609 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: -6)",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
]


async def test_n_and_N_step_over_whole_problems_of_a_real_torchrun_watchdog_timeout():
    """Two ranks' [rankN]:-prefixed lines, a C++ abort and its frames, three tracebacks: one stop each."""
    app = make_app("healthy")
    texts = [sanitize(raw)[0] for raw in (REAL / "torchrun_watchdog" / "run.log").read_bytes().split(b"\n")]
    async with app.run_test(size=SIZE) as pilot:
        add_lines(app, texts)
        app.run_screen.flush_log()
        await pilot.pause()
        log = app.query_one(LogPane)
        stops = []
        await pilot.press("home")
        while True:
            await pilot.press("n")
            if stops and log.current_line == stops[-1]:
                break
            stops.append(log.current_line)
        by_number = {line.number: line.text for line in log.shown_lines}
        named = [by_number[number] for number in stops]
        assert [next((words for words in WATCHDOG_PROBLEMS if words in text), text) for text in named] == WATCHDOG_PROBLEMS
        assert not any("Traceback (most recent call last)" in text or text.startswith("frame #") for text in named)
        assert f"{len(stops)} problems · n/N jump" in str(app.run_screen.log_box.border_subtitle)
        for number in reversed(stops[:-1]):  # N walks back over the same stops
            await pilot.press("N")
            assert log.current_line == number


async def test_backslash_filters_lines_and_escape_clears_and_follows():
    app = make_app("nan")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        total = log.line_count
        await pilot.press("backslash")
        search = app.query_one("#search", Input)
        search.cursor_blink = False
        assert search.has_focus
        await pilot.press(*"returned nan")
        await pilot.pause()
        assert log.line_count == 1
        assert "returned nan values" in log.shown_lines[0].text
        assert "filter" in app.query_one("#log-box").border_subtitle
        await pilot.press("enter")
        assert log.has_focus and log.line_count == 1
        await pilot.press("f")
        assert not log.following
        await pilot.press("escape")
        assert log.filter_text == "" and log.line_count == total
        assert log.following and log.scroll_y == log.max_scroll_y


async def test_t_cycles_all_three_themes_and_textual_themes_still_render():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        seen = [app.theme]
        for _ in range(3):
            await pilot.press("t")
            seen.append(app.theme)
        assert seen == ["pulse-dark", "pulse-high-contrast", "pulse-light", "pulse-dark"]
        assert app.thresholds.memory_warn_pct == 90
        app.theme = "pulse-high-contrast"
        await pilot.pause()
        assert app.thresholds.memory_warn_pct == 85
        assert {"pulse-dark", "pulse-light", "pulse-high-contrast"} <= set(app.available_themes)
        app.theme = "nord"  # a Textual theme without Pulse's line colours: defaults fill in
        await pilot.pause()
        assert app.get_css_variables()["line-oom"] == app.pulse_themes["pulse-dark"].theme.variables["line-oom"]


async def test_theme_flag_picks_the_theme():
    app = make_app(theme="pulse-light")
    async with app.run_test(size=SIZE):
        assert app.theme == "pulse-light"
        assert not app.current_theme.dark


async def test_status_line_says_reconnecting_in_n_seconds_then_failed():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert "connected" in status_text(app)
        app.state.set_connection(ConnectionState(ConnectionStatus.RECONNECTING, "connection lost", retry_at=NOW + 4))
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert "reconnecting in 4 s: connection lost" in status_text(app)
        app.clock.advance(3)
        app.run_screen.refresh_panes()
        assert "reconnecting in 1 s" in status_text(app)
        assert "sample 4 s ago" in status_text(app)
        app.state.set_connection(ConnectionState(ConnectionStatus.FAILED, "host key mismatch for 10.1.2.6"))
        app.run_screen.refresh_panes()
        assert "failed: host key mismatch for 10.1.2.6" in status_text(app)


async def test_read_only_mutating_keys_notify_and_do_nothing():
    config = dataclasses.replace(
        make_config(),
        warmup=WarmupConfig(command="python3 /root/warmup.py --gpu {gpu} --seq-len {seq_len}", gpus=(0, 1), seq_lens=(770,)),
    )
    app = make_app(read_only=True, target=LocalTarget(), config=config)
    async with app.run_test(size=SIZE) as pilot:
        assert "warmup" in {spec.action for spec in app.action_specs}
        await pilot.press("w")
        await app.workers.wait_for_complete()
        await pilot.pause()
        messages = [n.message for n in app.notices]
        assert any(m.startswith("read-only: warmup disabled") for m in messages), messages
        assert app.screen is app.screen_stack[0]
        assert "read-only" in status_text(app)


async def test_eight_gpus_fit_100x30():
    app = make_app()
    async with app.run_test(size=(100, 30)):
        pane = app.query_one(GpuPane)
        assert pane.size.height >= 8
        lines = [pane.render_line(y).text for y in range(8)]
        for index, line in enumerate(lines):
            assert line.lstrip().startswith(str(index))
            assert ("target" if index < 5 else "drafter") in line
            assert "/140.4 GiB" in line and "°C" in line


async def test_gpu_fault_and_read_error_are_shown_not_raised():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        gpus = (h200(0, 1000, 5.0, 40, 100), dataclasses.replace(h200(1, None, None, 40, 100), error="[GPU requires reset]"))
        app.state.add_sample(Sample(time=1.0, gpus=gpus, gpu_source="nvidia-smi", processes=run_processes()))
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert "[GPU requires reset]" in app.query_one(GpuPane).render_line(1).text
        assert "GPU fault" in app.query_one("#gpus-box").border_subtitle
        app.state.add_sample(Sample(time=2.0, gpu_error="nvidia-smi: NVML driver/library version mismatch"))
        app.run_screen.refresh_panes()
        assert "GPU read failed: nvidia-smi: NVML driver/library version mismatch" in app.query_one("#gpus-box").border_subtitle


async def test_processes_unseen_in_a_pid_namespace_are_said():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        host_pid_gpus = tuple(h200(i, 120_000, 97.0, 60, 600, pids=((2_281_447, 119_000),)) for i in range(8))
        app.state.add_sample(Sample(time=1.0, gpus=host_pid_gpus, gpu_source="nvml", processes=run_processes(), in_pid_namespace=True))
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert "processes unseen (PID namespace)" in app.query_one("#gpus-box").border_subtitle


async def test_process_rows_update_in_place_and_keep_the_cursor():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ProcessPane)
        table.move_cursor(2)
        main, *workers = run_processes()
        app.state.add_sample(Sample(time=1.0, processes=(dataclasses.replace(main, cpu_pct=3.5), *workers)))
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert table.cursor_row == 2 and table.row_count == 3
        assert table.cell_text(4127, "cpu") == "3.5"
        app.state.add_sample(Sample(time=2.0, processes=(main,)))  # the workers exited
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert table.row_count == 3 and table.alive_count == 1
        assert table.cell_text(4190, "state") == "gone"
        assert "1 alive" in app.query_one("#processes-box").border_title


async def test_the_process_table_scrolls_under_its_header_to_keep_the_cursor_in_view():
    """Keys and a click move the cursor; the header stays on top while thirty workers scroll under it."""
    main, worker, _ = run_processes()
    workers = tuple(dataclasses.replace(worker, pid=5000 + n) for n in range(30))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.state.add_sample(Sample(time=1.0, processes=(main, *workers)))
        app.run_screen.refresh_panes()
        table = app.query_one(ProcessPane)
        table.focus()
        await pilot.pause()

        def shown() -> list[str]:
            return [table.render_line(y).text for y in range(table.scrollable_content_region.height)]

        await pilot.press("end")
        assert table.selected_pid() == 5029 and table.scroll_offset.y > 0
        assert "PID" in shown()[0] and "5029" in shown()[-1]
        await pilot.press("up", "up")
        assert table.selected_pid() == 5027
        await pilot.press("home")
        assert table.selected_pid() == main.pid and table.scroll_offset.y == 0
        await pilot.press("pagedown")
        assert table.cursor_row == table.scrollable_content_region.height - 2
        await pilot.click(ProcessPane, offset=(10, 2))  # the header, then the first and second rows
        assert table.selected_pid() == table.pids[int(table.scroll_offset.y) + 1]
        await pilot.press("end", "f5")  # the tree moves the last worker up: the view follows it
        await pilot.pause()
        assert table.selected_pid() == 5029 and any("5029" in line for line in shown()[1:])


async def test_the_gpu_pane_takes_the_same_row_keys_as_the_process_table():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        gpus = app.query_one(GpuPane)
        gpus.focus()
        await pilot.press("pagedown")
        assert gpus.selected_gpus() == (min(gpus.size.height - 1, 7),)
        await pilot.press("end")
        assert gpus.selected_gpus() == (7,)
        await pilot.press("pageup", "home")
        assert gpus.selected_gpus() == (0,)


async def test_panes_that_keep_their_base_style_take_a_new_theme_and_focus():
    """Each line-API pane keeps its own Rich style between frames: a theme or a focus tint must still reach its rows."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        panes = [app.query_one(GpuPane), app.query_one(ProcessPane), app.query_one(LogPane), app.query_one(ThroughputPane)]

        def backgrounds() -> list:
            return [list(pane.render_line(pane.size.height - 1))[-1].style.bgcolor for pane in panes]

        before = backgrounds()
        assert before == [pane.rich_style.bgcolor for pane in panes]
        await pilot.press("t")
        await pilot.pause()
        after = backgrounds()
        assert after == [pane.rich_style.bgcolor for pane in panes] and after != before
        panes[1].focus()  # the process table is tinted when focused
        await pilot.pause()
        assert backgrounds()[1] == panes[1].rich_style.bgcolor != after[1]


async def test_a_real_torchrun_tree_captured_on_two_h200s_reads_as_launcher_over_its_ranks():
    """The processes `pulse check` read of a real torchrun hang (tests/data/real/live/h200x2_process_agent)."""
    import json
    from pathlib import Path

    from console.model import ProcessReading

    check = json.loads((Path(__file__).parent / "data/real/live/h200x2_process_agent/torchrun_hang/check.json").read_text())
    fields = ("pid", "ppid", "state", "elapsed_s", "threads", "rss_mib", "cpu_pct", "cmdline", "role", "rank", "label")
    processes = tuple(ProcessReading(**{key: p[key] for key in fields}) for p in reversed(check["processes"]))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.state.add_sample(Sample(time=1.0, processes=processes))
        app.run_screen.refresh_panes()
        table = app.query_one(ProcessPane)
        table.focus()
        await pilot.press("f5")
        assert table.pids[:3] == [605, 970, 971]  # the scenario's own processes follow, gone
        assert [table.cell_text(pid, "role") for pid in table.pids[:3]] == ["launcher (torchrun)", "rank 0 · GPU 0", "rank 1 · GPU 1"]
        assert table.cell_text(970, "command") == "└ ddp_allreduce.py --hang-rank 1"
        header, launcher, rank0 = (table.render_line(y).text for y in range(3))
        # Figures are right-aligned under their headings: the busy rank's CPU% ends where "CPU%" does.
        assert rank0.index("100.5") + len("100.5") == header.index("CPU%") + len("CPU%")
        assert "S sleep" in launcher and "R run" in rank0


async def test_a_click_below_the_last_process_selects_nothing():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ProcessPane)
        table.select_pid(4127)
        await pilot.click(ProcessPane, offset=(10, table.row_count + 2))
        assert table.selected_pid() == 4127


async def test_log_silence_is_shown_and_turns_loud_past_the_stall_threshold():
    app = make_app("hang")
    async with app.run_test(size=SIZE):
        box = app.query_one("#processes-box")
        assert box.border_subtitle == "log grew 12m 08s ago"
        assert box.has_class("-crit")


async def test_a_log_that_grew_under_2s_ago_grew_just_now_so_a_1hz_run_holds_the_title_still():
    app = make_app("healthy")
    async with app.run_test(size=SIZE) as pilot:
        box = app.query_one("#processes-box")
        silent = app.state.log_silent_s(app.clock())
        assert silent < 2 and box.border_subtitle == "log grew just now"
        app.clock.advance(2.0 - silent)
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert box.border_subtitle == "log grew 2s ago"


async def test_a_log_silent_past_a_short_stall_limit_never_grew_just_now():
    from console.config import StallConfig

    app = make_app("healthy", config=dataclasses.replace(make_config(), stall=StallConfig(log_silent_s=1.0)))
    async with app.run_test(size=SIZE):
        box = app.query_one("#processes-box")
        assert 1.0 <= app.state.log_silent_s(app.clock()) < 2
        assert box.border_subtitle == "log grew 1s ago" and box.has_class("-crit")


async def test_a_figure_whose_whole_line_style_changes_is_drawn_again():
    app = make_app()
    async with app.run_test(size=SIZE):
        pane = app.query_one(ThroughputPane)
        step_row = [name for name, _ in pane.rows].index("step")
        pane.update_figure("step", Text("below normal", style="red"))
        red = pane.render_line(step_row)
        pane.update_figure("step", Text("below normal", style="green"))
        assert pane.render_line(step_row) != red


async def test_an_overdue_rate_is_shown_as_history_not_as_the_current_rate():
    """A hung run's last tok/s must not read as its rate now: the pane says how old it is."""
    app = make_app("healthy")
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ThroughputPane)
        assert "avg" in pane.figures["rate"].plain
        app.clock.advance(95)
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert "last rate written 1m 35s ago" in pane.figures["rate"].plain
        assert "no rate now" in pane.figures["baseline"].plain
        assert pane.stale


async def test_log_lines_figures_are_drawn_with_the_next_sample_not_on_a_tick_of_their_own(monkeypatch):
    """At 1 Hz a sample's frame draws what lines changed: the tick draws it only when no sample came
    for a second (one frame a second for a watched run, not two). The sample, come while the log
    writes lines, waits for the next line's frame, or its own deadline."""
    from console.ui.screens import run_screen

    monkeypatch.setattr(run_screen, "SAMPLE_WAITS_FOR_LINE_S", 0.05)
    app = make_app("healthy")
    async with app.run_test(size=SIZE) as pilot:
        figures = app.query_one(ThroughputPane).figures
        add_lines(app, ["step 9999/50000 | loss 0.1234 | 14.1K tok/s | lr 3.0e-04"])
        app.run_screen.mark_changed()
        await pilot.pause()
        assert app.query_one(LogPane).last_number == app.state.lines_received  # the line is drawn at once
        app.clock.advance(0.5)
        app.run_screen.tick()
        assert "0.1234" not in figures["loss"].plain  # painted 0.5 s ago: left to the next sample
        app.state.add_sample(dataclasses.replace(app.state.latest, time=app.state.latest.time + 1))
        app.run_screen.mark_changed()
        for _ in range(100):  # the held sample's deadline, then its frame (on a loaded box, later)
            await pilot.pause(0.02)
            if "0.1234" in figures["loss"].plain:
                break
        assert "0.1234" in figures["loss"].plain
        add_lines(app, ["step 10009/50000 | loss 0.0999 | 14.1K tok/s | lr 3.0e-04"])
        app.run_screen.mark_changed()
        await pilot.pause()
        app.clock.advance(run_screen.TICK_AFTER_SAMPLE_S)
        app.run_screen.tick()  # no sample for past a sample's period: the tick draws it
        assert "0.0999" in figures["loss"].plain


async def test_N_while_following_finds_the_problem_line_on_screen():
    """The hung run's traceback is at the end of the log: N from the end selects its last line."""
    app = make_app("hang")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPane)
        assert log.following
        last_problem = [line for line in log.shown_lines if line.info.kind.value == "traceback"][-1]
        await pilot.press("N")
        assert log.current_line == last_problem.number
        assert not any("no problem" in n.message for n in app.notices)


async def test_end_resumes_following_after_a_jump():
    app = make_app("oom")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        await pilot.press("home", "n")
        assert not log.following and log.current_line is not None
        await pilot.press("end")
        await pilot.pause()
        assert log.following and log.current_line is None
        add_lines(app, ["step 1 | loss 1.0"] * 3)
        app.run_screen.flush_log()
        await pilot.pause()
        assert log.scroll_y == log.max_scroll_y and log.unseen == 0


async def test_regex_search_highlights_matches_and_n_N_step_between_them():
    app = make_app("healthy")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        await pilot.press("slash")
        app.query_one("#search", Input).cursor_blink = False
        await pilot.press(*r"step 2[01][48]0/", "enter")
        await pilot.pause()
        matches = [line.number for line in log.shown_lines if line.text.startswith(("step 2040/", "step 2080/", "step 2140/", "step 2180/"))]
        assert len(matches) == 4 and log.line_count > 100  # a search shows every line
        assert log.current_line == matches[-1]  # Enter: the nearest match above the end
        await pilot.press("N")
        assert log.current_line == matches[-2]
        await pilot.press("n")
        assert log.current_line == matches[-1]
        await pilot.press("n")
        assert log.current_line == matches[-1]
        assert any("no match below" in n.message for n in app.notices)
        row = log.shown_lines.index(next(line for line in log.shown_lines if line.number == matches[-1])) - int(log.scroll_y)
        strip = log.render_line(row)
        match_bg = log.get_component_rich_style("log-pane--match").bgcolor
        highlighted = "".join(segment.text for segment in strip if segment.style and segment.style.bold and segment.style.bgcolor != log.rich_style.bgcolor)
        assert "step 2180/" in highlighted and match_bg is not None
        assert "search “step 2[01][48]0/” · n/N" in app.query_one("#log-box").border_subtitle


async def test_a_pattern_that_is_not_a_regex_matches_literally_and_says_so():
    app = make_app("nan")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        await pilot.press("backslash")
        app.query_one("#search", Input).cursor_blink = False
        await pilot.press(*"nan(")
        await pilot.pause()
        assert log.line_count == 0
        assert "not a regex" in app.query_one("#log-box").border_subtitle


async def test_line_numbers_toggle_and_go_to_line():
    app = make_app("healthy")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        await pilot.press("number_sign")
        assert log.line_numbers
        first_visible = int(log.scroll_y)
        number = log.shown_lines[first_visible].number
        assert log.render_line(0).text.lstrip().startswith(f"{number} ")
        await pilot.press("colon")
        app.query_one("#search", Input).cursor_blink = False
        await pilot.press(*"42", "enter")
        assert log.current_line == 42 and not log.following
        top = int(log.scroll_y)
        assert 42 in [line.number for line in log.shown_lines[top : top + log.size.height]]
        await pilot.press("colon", *"0", "enter")
        assert log.current_line == 1
        assert any("line 0 is not held" in n.message for n in app.notices)
        await pilot.press("colon", *"x1", "enter")
        assert any("not a line number" in n.message for n in app.notices)
        await pilot.press("escape", "number_sign")
        assert not log.line_numbers and log.render_line(0).text.startswith("  ")


async def test_l_shows_the_log_at_the_newest_problem_line():
    """Verdicts say "read the log (l)": the key exists and lands on the problem."""
    app = make_app("nan")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        newest = [line for line in log.shown_lines if line.info.kind.value in ("nan", "traceback")][-1]
        await pilot.press("tab")
        await pilot.press("l")
        assert log.has_focus and log.current_line == newest.number
        top = int(log.scroll_y)
        assert newest.number in [line.number for line in log.shown_lines[top : top + log.size.height]]


async def test_80x24_is_compact_one_line_per_role_and_the_log_keeps_room():
    app = make_app("hang")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.query_one(GpuPane)
        assert app.screen.has_class("-compact") and pane.size.height == 2
        target, drafter = (pane.render_line(y).text for y in range(2))
        assert target.startswith("target  0–4") and "118.5–123.4/140.4 GiB" in target and "util 0%" in target
        assert drafter.startswith("drafter 5–7") and "74.8–76.4/140.4 GiB" in drafter
        assert app.query_one(LogPane).size.height >= 8
        assert app.screen.max_scroll_y == 0  # nothing overflows


async def test_the_verdict_leads_the_header_and_read_only_and_the_host_are_never_cut():
    from tests.snapshot_apps.scenarios import diagnosed

    for width in (80, 120):
        app = make_app("hang", read_only=True)
        async with app.run_test(size=(width, 30)) as pilot:
            diagnosed(app)
            await pilot.pause()
            shown = app.query_one(StatusBar).render_line(0).text
            assert shown.startswith(" ◆ hung") and "read-only" in shown, shown
            assert shown.rstrip().endswith("root@10.1.2.6 · pct 200"), shown  # the verdict's reason gives way first


async def test_read_only_hides_mutating_keys_from_the_footer():
    from console.config import CustomAction

    config = dataclasses.replace(
        make_config(),
        warmup=WarmupConfig(command="python3 /root/warmup.py --gpu {gpu} --seq-len {seq_len}", gpus=(0, 1), seq_lens=(770,)),
        actions=(CustomAction(name="drop caches", key="x", command="sync", confirm=True), CustomAction(name="smi", key="y", command="nvidia-smi", confirm=False, mutating=False)),
    )
    for read_only in (False, True):
        app = make_app(read_only=read_only, target=LocalTarget(), config=config)
        async with app.run_test(size=(240, 40)) as pilot:
            await pilot.pause()
            shown = {binding.key for _, binding, enabled, _ in app.screen.active_bindings.values() if binding.show and enabled}
            assert {"d", "p", "l", "y"} <= shown
            assert ({"R", "w", "k", "x"} & shown) == (set() if read_only else {"R", "w", "k", "x"})


def test_memory_is_written_in_gib_everywhere():
    from console.diagnose import diagnose
    from console.evidence import from_samples
    from tests.snapshot_apps.scenarios import build_state

    state = build_state("hang")
    config = make_config()
    verdict = diagnose(from_samples(state.samples[0], state.samples[-1], config, state, timed=False), config)
    gpu_lines = [line for line in verdict.evidence if line.startswith("GPU")]
    assert gpu_lines == ["GPUs 0–7 util 0%, 74.8–123.4 GiB used (pid 4127)"]  # eight alike GPUs, one line


async def test_gpu_and_pid_placeholders_come_from_the_selection():
    """A custom action on the GPU row and the process row the operator selected, not GPU 0 and the main PID."""
    from console.config import CustomAction

    show = CustomAction(name="show", key="x", command="echo gpu={gpu} pid={pid}", confirm=True)
    app = make_app(target=LocalTarget(), config=dataclasses.replace(make_config(), actions=(show,)))
    async with app.run_test(size=SIZE) as pilot:
        gpus = app.query_one(GpuPane)
        gpus.focus()
        await pilot.press("down", "down", "down")
        assert gpus.selected_gpus() == (3,)
        processes = app.query_one(ProcessPane)
        processes.focus()
        processes.select_pid(4191)
        await pilot.press("x")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen.lines[-1] == "  $ echo gpu=3 pid=4191"


async def test_a_custom_action_on_a_comma_is_bound():
    """',' separates Textual's keys in a binding: a custom action on it is bound by the key's name, not broken."""
    from console.config import CustomAction

    show = CustomAction(name="show", key=",", command="echo comma", confirm=True)
    app = make_app(target=LocalTarget(), config=dataclasses.replace(make_config(), actions=(show,)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("comma")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen.lines[-1] == "  $ echo comma"


async def test_the_command_column_shows_the_script_and_its_arguments():
    from console.observe.roles import script_and_args

    assert script_and_args("/usr/bin/python3.11 -u -X faulthandler /root/train.py --lr 3") == "train.py --lr 3"
    assert script_and_args("python -m torch.distributed.run --nproc_per_node 2 train.py") == "torch.distributed.run --nproc_per_node 2 train.py"
    assert script_and_args("/opt/conda/bin/torchrun --nproc_per_node 8 train.py") == "/opt/conda/bin/torchrun --nproc_per_node 8 train.py"
    app = make_app()
    async with app.run_test(size=SIZE):
        assert app.query_one(ProcessPane).cell_text(4127, "command").startswith("train_dflash_pipeline.py --target-gpus")


async def test_ctrl_c_quits():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash")  # even from the search box
        await pilot.press("ctrl+c")
    assert app.return_code == 0


async def test_f5_shows_the_processes_as_a_tree_and_keeps_the_selection():
    from console.ui.panes.process_pane import tree_order

    launcher = dataclasses.replace(run_processes()[0], pid=4100, ppid=1, cmdline="bash -lc python3 -u /root/train.py")
    main, *workers = (dataclasses.replace(p, ppid=4100) if p.pid == 4127 else p for p in run_processes())
    flat = (*workers, main, launcher)  # as /proc lists them: any order
    assert [(p.pid, depth) for p, depth in tree_order(list(flat))] == [(4100, 0), (4127, 1), (4190, 2), (4191, 2)]
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.state.add_sample(Sample(time=1.0, processes=flat))
        app.run_screen.refresh_panes()
        await pilot.pause()
        table = app.query_one(ProcessPane)
        table.focus()
        table.select_pid(4190)
        await pilot.press("f5")
        assert table.pids == [4100, 4127, 4190, 4191]
        assert table.cell_text(4190, "command").startswith("  └ train_dflash_pipeline.py")
        assert table.selected_pid() == 4190
        await pilot.press("v")
        assert table.cell_text(4190, "command").startswith("train_dflash_pipeline.py")


def test_every_step_and_key_a_verdict_names_is_bound():
    """The rule table's step column names NEXT_STEPS, each has a key, and a verdict's next step names no key:
    the console puts its step's key before it."""
    import re

    import console.diagnose.rules as diagnose_module
    from console.diagnose import diagnose
    from console.evidence import from_samples
    from console.ui.keymap import ACTIONS, STEP_KEYS
    from console.verdicts import NEXT_STEPS
    from tests.snapshot_apps.scenarios import SCENARIOS, build_state

    bound = {key for spec in ACTIONS for key in spec.key_display.split()}
    table_steps = set(re.findall(r"\|\s+([a-z/]+)\s+\|\n", diagnose_module.__doc__))
    steps = {step for cell in table_steps - {"step"} for step in cell.split("/")}  # "step": the header
    assert steps == set(NEXT_STEPS) == set(STEP_KEYS)
    named = set(STEP_KEYS.values())
    config = make_config()
    for scenario in SCENARIOS:
        state = build_state(scenario)
        verdict = diagnose(from_samples(state.samples[0], state.samples[-1], config, state, timed=False), config)
        assert verdict.step is None or verdict.step in NEXT_STEPS
        assert not re.search(r"\(([A-Za-z])\)|, [A-Za-z]\)", verdict.next_step), verdict.next_step
    assert named >= {"p", "l", "R", "w"}
    assert named <= bound, named - bound


async def test_the_diagnosis_says_the_next_step_once_and_its_key_takes_it():
    from console.ui.dialogs.diagnosis_screen import DiagnosisScreen, verdict_text
    from tests.snapshot_apps.scenarios import diagnosed

    app = make_app("nan")
    async with app.run_test(size=(80, 24)) as pilot:
        diagnosed(app)
        verdict = app.verdict
        text = verdict_text(verdict, None).plain
        assert verdict.step == "log" and text.count("(l)") == 1 and "(key" not in text
        assert text.index("Next step") < text.index("Evidence")
        await app.push_screen(DiagnosisScreen(verdict))
        await pilot.press("l")
        await pilot.pause()
        log = app.query_one(LogPane)
        assert app.screen is app.screen_stack[0] and log.has_focus and log.current_line is not None


async def test_a_next_step_key_in_read_only_says_why_it_is_refused():
    from console.ui.dialogs.diagnosis_screen import DiagnosisScreen
    from tests.snapshot_apps.scenarios import diagnosed

    app = make_app("buffered", read_only=True, target=LocalTarget())
    async with app.run_test(size=SIZE) as pilot:
        diagnosed(app)
        assert app.verdict.step == "restart"
        await app.push_screen(DiagnosisScreen(app.verdict))
        await pilot.press("R")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen is app.screen_stack[0]
        assert any(n.message.startswith("read-only: restart disabled") for n in app.notices)
