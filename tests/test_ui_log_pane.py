"""The log pane alone: bounded ingest in batches, styled problem lines, untrusted text kept literal."""

from __future__ import annotations

from textual.app import App, ComposeResult

from console.model import LineInfo, LineKind, LogLine
from console.ui.panes.log_pane import LogPane
from console.ui.themes import load_themes


class LogApp(App[None]):
    """Just a log pane, with Pulse's themes (its CSS uses their line colours)."""

    def __init__(self, max_lines: int = 1000) -> None:
        super().__init__()
        self.max_lines = max_lines
        for loaded in load_themes().values():
            self.register_theme(loaded.theme)
        self.theme = "pulse-dark"

    def compose(self) -> ComposeResult:
        yield LogPane(max_lines=self.max_lines)


def lines(start: int, count: int, kind: LineKind = LineKind.NORMAL, text: str = "line {n}") -> list[LogLine]:
    return [LogLine(n, text.format(n=n), LineInfo(kind)) for n in range(start, start + count)]


async def test_ingest_stays_bounded_and_keeps_the_newest():
    app = LogApp(max_lines=1000)
    async with app.run_test(size=(80, 20)) as pilot:
        pane = app.query_one(LogPane)
        for batch in range(25):
            pane.append(lines(batch * 2000 + 1, 2000))
        await pilot.pause()
        assert pane.line_count <= 1000
        assert pane.last_number == 50_000
        assert pane.shown_lines[-1].text == "line 50000"
        assert pane.scroll_y == pane.max_scroll_y


async def test_problem_lines_are_styled_and_marked_in_the_gutter():
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        pane = app.query_one(LogPane)
        pane.append(lines(1, 3) + lines(4, 1, LineKind.OOM, "torch.OutOfMemoryError: CUDA out of memory."))
        await pilot.pause()
        oom = pane.render_line(3)
        normal = pane.render_line(0)
        assert oom.text.startswith("M▌torch.OutOfMemoryError")
        assert normal.text.startswith("  line 1")
        oom_styles = {segment.style.color for segment in oom if segment.text.strip()}
        assert pane.get_component_rich_style("log-pane--oom").color in oom_styles


async def test_markup_in_lines_is_shown_literally():
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        pane = app.query_one(LogPane)
        pane.append(lines(1, 1, text="[bold red]not markup[/] [link=file:///etc/passwd]x[/link]"))
        await pilot.pause()
        assert pane.render_line(0).text.startswith("  [bold red]not markup[/] [link=file:///etc/passwd]x[/link]")


async def test_filter_applies_to_lines_that_arrive_later():
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        pane = app.query_one(LogPane)
        pane.append(lines(1, 50))
        pane.filter_text = "LINE 4"
        await pilot.pause()
        assert [line.number for line in pane.shown_lines] == [4, *range(40, 50)]
        pane.append(lines(51, 400))
        shown = [line.number for line in pane.shown_lines]
        assert shown[-1] == 450 and 399 not in shown and 400 in shown
        pane.filter_text = ""
        assert pane.line_count == 450


async def test_the_logs_own_colours_are_kept():
    """SGR colours from the log (sanitize_styled's spans) colour their stretch; the rest keeps the pane's style."""
    from console.observe.lines import classify_line
    from console.observe.textsafe import sanitize_styled

    text, cut, sgr = sanitize_styled(b"\x1b[1;31mERROR\x1b[0m [bold]not markup[/bold]")
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        pane = app.query_one(LogPane)
        pane.append([LogLine(1, text, classify_line(text), cut, 0.0, sgr)])
        await pilot.pause()
        segments = [segment for segment in pane.render_line(0) if segment.text.strip()]
        assert "".join(segment.text for segment in segments).startswith("ERROR [bold]not markup[/bold]")
        red = [segment for segment in segments if segment.style.color is not None and segment.style.color.number == 1]
        assert "".join(segment.text for segment in red) == "ERROR" and all(segment.style.bold for segment in red)


def test_a_log_cannot_hide_its_text_or_blink():
    from console.ui.panes.styles import sgr_style

    hidden = sgr_style("8;5;31")
    assert not hidden.conceal and not hidden.blink and hidden.color.number == 1
