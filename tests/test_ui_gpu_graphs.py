"""The console's GPU graphs (`g`) and the throughput graph's slowdown mark, driven by keys through Pilot."""

from __future__ import annotations

from dataclasses import replace

from console.diagnose import Verdict
from console.diagnose.steady import RECOVER_S
from console.ui.panes.gpu_pane import GpuPane
from console.ui.panes.throughput_pane import LINE, ThroughputPane
from tests.snapshot_apps.scenarios import TARGET_NOW, diagnosed, make_app

SIZE = (120, 40)


def rows(pane) -> list[str]:
    return [pane.render_line(y).text for y in range(pane.size.height)]


async def test_g_draws_the_gpus_as_graphs_and_back_keeping_the_selected_row():
    app = make_app("slow", gpu_seconds=300)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(GpuPane)
        pane.focus()
        await pilot.press("down", "down")
        bars = rows(pane)
        assert "util" not in bars[0] and pane.selected_gpus() == (2,)
        await pilot.press("g")
        graphs = rows(pane)
        assert pane.graphs and all(f" {label} " in graphs[0] for label in ("util", "mem", "power", "SM"))
        assert graphs[2].startswith("2 target") and pane.selected_gpus() == (2,)
        assert app.run_screen.gpus_box.border_subtitle.endswith("graphs of the last 4m 59s")
        # A new reading moves the graphs on: the newest value is written after each.
        newest = app.state.latest
        busy = tuple(replace(gpu, utilization_pct=100.0) for gpu in newest.gpus)
        app.state.add_sample(replace(newest, time=TARGET_NOW + 1, gpus=busy))
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert "util" in rows(pane)[0] and " 100%" in rows(pane)[0]
        await pilot.press("g")
        assert not pane.graphs and rows(pane) != graphs and "graphs" not in app.run_screen.gpus_box.border_subtitle


async def test_the_graphs_of_a_compact_terminal_are_one_row_a_role():
    app = make_app("slow", gpu_seconds=120)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GpuPane)
        await pilot.press("g")
        shown = rows(pane)
        assert shown[0].lstrip().startswith("target 0–4 util ") and shown[1].startswith("drafter 5–7 util ")
        assert " SM " not in shown[0]  # 80 columns: the clock gives way, so util, mem and power keep readable graphs


async def test_a_slowdown_the_verdict_found_is_marked_on_the_throughput_graph_until_it_ends():
    app = make_app("slow")
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ThroughputPane)
        assert pane.slowdown is None
        diagnosed(app)
        assert app.verdict is not None and app.verdict.slowdown is not None
        await pilot.pause()  # no new sample: the verdict alone repaints the pane
        start, baseline = pane.slowdown
        assert baseline == app.verdict.slowdown.baseline.rate and 0 < start < len(pane.sparklines["rate-spark"])
        assert LINE in "".join(rows(pane)[1:3]) and "slow for 2m 38s" in rows(pane)[3]
        healthy = Verdict("healthy", "the run is alive and its log progresses", [], "nothing to do")
        app.set_verdict(healthy)
        app.clock.advance(RECOVER_S + 1)  # the end of a problem shows once it holds (console.diagnose.steady)
        app.set_verdict(healthy)
        await pilot.pause()
        assert pane.slowdown is None and LINE not in "".join(rows(pane))
