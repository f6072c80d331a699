"""Layouts that fit 120×40 and 80×24 (issue 33, item 7): every figure keeps its unit, the header
keeps the host and elides the verdict's reason, the footer shows every key whole. On the
scenarios' screens (Pilot) and on `pulse demo` in a real terminal (tmux)."""

from __future__ import annotations

import re

import pytest
from rich.cells import cell_len

from console.demo.run import PACKAGE_ROOT
from console.ui.panes.gpu_pane import GpuPane
from console.ui.panes.key_hints import KeyHints
from console.ui.panes.process_pane import ProcessPane
from console.ui.panes.status_bar import StatusBar
from console.ui.panes.throughput_pane import ThroughputPane
from console.ui.run_figures import PROCESS_COLUMNS
from tests.snapshot_apps.scenarios import diagnosed, make_app
from tests.tmux import TmuxSession, needs_tmux

SIZES = [(120, 40), (80, 24)]
SCENARIOS = ["healthy", "hang", "slow", "buffered", "oom", "nan", "dead"]
#: Where the scenarios' run is, as the header ends.
WHERE = "dflash-7b on root@10.1.2.6 · pct 200"
#: A GPU row's figures, each with its unit: memory used/total GiB, utilisation %, °C, W.
GPU_FIGURES = re.compile(r"[\d.–]+/[\d.]+ GiB .*\d%.* [\d–]+°C .*\d+W")
#: A duration as the elapsed column writes it: `42s`, `3h41m`, `2d4h`.
DURATION = re.compile(r"^\d+[smhd](\d{2}[smh])?$")


def footer_rows(rows: list[str]) -> list[str]:
    """A terminal's rows under the log box's bottom border, blank ones left out."""
    last_border = max(n for n, row in enumerate(rows) if row.startswith("╰"))
    return [row for row in rows[last_border + 1 :] if row]


def widget_rows(widget) -> list[str]:
    return [widget.render_line(y).text for y in range(widget.size.height)]


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_every_figure_keeps_its_unit_and_every_key_is_whole(scenario, size):
    app = make_app(scenario)
    async with app.run_test(size=size) as pilot:
        diagnosed(app)
        await pilot.pause()
        width = size[0]

        header = app.query_one(StatusBar).render_line(0).text.rstrip()
        assert header.startswith(f" ◆ {app.verdict.name}") and header.endswith(WHERE), header
        assert cell_len(header) <= width

        gpus = app.query_one(GpuPane)
        for row in widget_rows(gpus):
            assert GPU_FIGURES.search(row), f"a GPU row lost a unit: {row!r}"

        table = app.query_one(ProcessPane)
        labels = [label for label, _ in PROCESS_COLUMNS if label]
        heading = widget_rows(table)[0].split()
        assert heading[:3] == ["PID", "role", "state"] and set(heading) <= set(labels), heading
        if "elapsed" in heading:
            for pid in table.pids:
                assert DURATION.match(table.cell_text(pid, "elapsed"))
        assert "CPU%" in heading  # what tells a hung run from a busy one, at any size
        for row, pid in zip(widget_rows(table)[1:], table.pids):
            assert row.split()[1] == str(pid) and table.cell_text(pid, "cpu") in row.split()
        if width >= 120:
            assert {"RSS", "thr", "elapsed"} <= set(heading)

        pane = app.query_one(ThroughputPane)
        for (name, _), row in zip(pane.rows, widget_rows(pane)):
            if name in pane.figures:
                forms = [form.plain.rstrip() for form in (pane.figures[name], *pane.shorter.get(name, ()))]
                assert row.rstrip() in forms, f"{name} row cut: {row!r}, not one of {forms}"

        hints = app.query_one(KeyHints)
        rows = widget_rows(hints)
        assert all(cell_len(row.rstrip()) <= width for row in rows)
        shown = " ".join(rows)
        for key, does in hints.hints:
            assert f"{key} {does}" in shown, f"{key} {does} missing from the footer: {rows}"
        assert {"q", "h", "t", "f", "^p"} <= {key for key, _ in hints.hints}


async def test_the_header_drops_the_reason_before_the_host_on_a_long_verdict():
    app = make_app("hang", read_only=True)
    async with app.run_test(size=(120, 30)) as pilot:
        diagnosed(app)
        await pilot.pause()
        summary = app.verdict.summary
        header = app.query_one(StatusBar).render_line(0).text.rstrip()
        assert len(summary) > 60  # too long to keep beside the host at 120 columns
        assert header.startswith(" ◆ hung: " + summary[:20]) and "…" in header
        assert "read-only" in header and header.endswith(WHERE), header


async def test_the_footer_wraps_and_follows_the_bindings():
    """Read-only hides the mutating keys from the grid, and the grid takes the lines it needs."""
    from console.remote.target import LocalTarget

    for read_only in (False, True):
        app = make_app("healthy", read_only=read_only, target=LocalTarget())
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            hints = app.query_one(KeyHints)
            keys = {key for key, _ in hints.hints}
            assert ({"R", "k"} & keys) == (set() if read_only else {"R", "k"})
            assert hints.size.height == len(hints.lines(80)) >= 2
            assert app.screen.max_scroll_y == 0  # the grid takes its room from the log, nothing overflows


def drawn_at(rows: list[str], width: int) -> bool:
    """The console has drawn its frame at `width` columns: a box's bottom border spans the terminal, whole
    (a frame drawn wider and cropped by the terminal's resize ends in "─", not "╯")."""
    return any(row.startswith("╰") and row.endswith("╯") and cell_len(row) == width for row in rows)


@needs_tmux
def test_pulse_demo_fits_the_terminal(tmp_path):
    """The real console on the hang demo, at each size (one demo: started at the first, its terminal then
    resized, as a user would): the host stays in the header once the verdict is long, the footer's last row
    ends in a whole key, the process table's columns keep their units."""
    command = (f"cd {PACKAGE_ROOT} && PYTHONPATH={PACKAGE_ROOT} HOME={tmp_path} XDG_STATE_HOME={tmp_path / 'state'} "
               f"TMPDIR={tmp_path} TEXTUAL_ANIMATIONS=none {PACKAGE_ROOT / '.venv' / 'bin' / 'pulse'} demo --scenario hang")
    with TmuxSession(f"pulse-layout-{tmp_path.name}", command, SIZES[0]) as terminal:
        for size in SIZES:
            if size != terminal.size:
                terminal.resize(size)
            # Drawn at this size, once the verdict's toast (its edge a ▌) has gone from over the footer,
            # with the header fitted to it: a frame drawn while the resize is under way may still hold
            # the header fitted to the last size, cut at the new edge.
            rows = terminal.wait_for(lambda rows: drawn_at(rows, size[0]) and rows[0].startswith(" ◆ hung")
                                     and rows[0].rstrip().endswith("on pulse-demo")
                                     and "▌" not in " ".join(footer_rows(rows)), 90,
                                     f"the hang demo never showed its verdict and its host over a clear footer at {size[0]}x{size[1]}")
            assert len(rows) == size[1], rows
            footer = footer_rows(rows)
            assert footer[-1].endswith("^p Palette") and all(len(row) <= size[0] for row in footer), footer
            for hint in ("? Help", "d Diagnose", "R Restart", "k Signal", "f Follow", "t Theme", "h Timeline", "q Quit"):
                assert hint in " ".join(footer), "\n".join(rows)
            heading = next(row for row in rows if " PID " in row)
            assert "CPU%" in heading and "sta " not in heading, heading
            if size[0] >= 120:
                elapsed = next(row for row in rows if "main · GPU" in row)
                assert re.search(r" \d+[smh](\d\d[smh])? ", elapsed), elapsed
        terminal.keys("q")
