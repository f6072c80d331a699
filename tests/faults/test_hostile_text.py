"""Hostile log text through the real follower into the real console, checked on the rendered screen.

A real process writes escape sequences (CSI, OSC title and OSC 52 clipboard writes, DCS, APC,
8-bit C1 forms), NUL bytes, invalid UTF-8, right-to-left and combining text and a 10 MB line
without a newline into the run's log, and names a newer log file with an escape sequence. The
PulseApp runs headless with a Monitor over a real target; every rendered segment of the log pane
and the whole exported screen must be free of control characters, and the cut line must say so.
"""

from __future__ import annotations

import random
import re
import unicodedata
from pathlib import Path

import pytest

from console.config import Config, GpuConfig, RunConfig
from console.monitor import Monitor
from console.remote.connect import make_target
from console.remote.target import LocalTarget
from console.state import RunState
from console.ui.app import PulseApp
from console.ui.panes.log_pane import CUT_MARK, GUTTER, LogPane
from tests.faults.helpers import record_figure, until
from tests.test_follow import append

#: Sequences that would act on a terminal if passed through: each is followed by visible text.
ESCAPES = [
    b"\x1b]0;PWNED-TITLE\x07",                       # OSC 0: window title, BEL-terminated
    b"\x1b]2;PWNED-TITLE\x1b\\",                     # OSC 2: title, ST-terminated
    b"\x1b]52;c;cm0gLXJmIH4vCg==\x07",               # OSC 52: write the clipboard
    b"\x1b]8;;https://evil.invalid/\x1b\\",          # OSC 8: hyperlink
    b"\x1b]1337;File=inline=1:AAAA\x07",             # iTerm2 inline file
    b"\x1bP+q544e\x1b\\",                            # DCS XTGETTCAP: asks the terminal to answer
    b"\x1bP$qm\x1b\\",                               # DCS DECRQSS
    b"\x1b_Gf=100,a=T;AAAA\x1b\\",                   # APC: kitty graphics
    b"\x1b^privacy message\x1b\\",                   # PM
    b"\x1bXstart of string\x1b\\",                   # SOS
    b"\x1b[2J\x1b[H",                                # clear screen, cursor home
    b"\x1b[10;10H",                                  # cursor position
    b"\x1b[5A\x1b[3D",                               # cursor up, left
    b"\x1b[?1049h",                                  # alternate screen
    b"\x1b[6n",                                      # device status report (terminal answers)
    b"\x1b[38;2;255;0;0m",                           # truecolour
    b"\x1b[0m",
    b"\x1b7\x1b8",                                   # save/restore cursor
    b"\x1bc",                                        # full reset
    b"\xc2\x9b31m",                                  # 8-bit CSI as UTF-8 (U+009B)
    b"\xc2\x9d0;PWNED-TITLE\xc2\x9c",                # 8-bit OSC as UTF-8
    b"\x9b31m",                                      # 8-bit CSI as a raw byte (invalid UTF-8)
    b"\x1b]0;PWNED-TITLE",                           # unterminated OSC: swallows the rest of its line
]
TEXTS = [
    b"plain step 12 | loss 2.31",
    "שלום עולם مرحبا بالعالم".encode(),              # right-to-left scripts
    "\u202egnp.exe\u202c and \u2067isolate\u2069".encode(),  # bidi overrides and isolates
    "Z\u0351\u0300\u0301a\u0362\u0315l\u0316\u0317go e\u0301\u0301\u0301".encode(),  # stacked combining marks
    "👩‍👩‍👧‍👦 family ☃ 日本語".encode(),
    b"nul\x00in\x00the\x00middle",
    b"bell\x07 backspace\x08\x08 formfeed\x0c vtab\x0b del\x7f",
    b"invalid utf-8 \xff\xfe\xc3\x28 \xed\xa0\x80 end",
    b"[bold red]markup[/] [link=http://x]not a link[/link]",
]
#: Characters that must never reach the terminal: C0 (but none is even expected), DEL, C1, bidi overrides.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TEN_MB = 10 * 1024 * 1024


def hostile_lines(seed: int, count: int) -> tuple[list[bytes], int]:
    """`count` lines mixing escapes into text (seeded, so a failure repeats) and how many escapes they hold."""
    rng = random.Random(seed)
    lines, escapes = [], 0
    for number in range(count):
        parts = [b"hostile %d " % number]
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.6:
                parts.append(rng.choice(ESCAPES[:-1]))  # the unterminated one only at the end
                escapes += 1
            parts.append(rng.choice(TEXTS))
        if rng.random() < 0.1:
            parts.append(ESCAPES[-1])
            escapes += 1
        lines.append(b"".join(parts))
    return lines, escapes


def assert_clean(text: str, where: str) -> None:
    found = CONTROL.search(text)
    assert found is None, f"{where}: control character {found.group()!r} in {text[:120]!r}"
    assert "PWNED-TITLE" not in text, f"{where}: an escape sequence's payload is shown: {text[:120]!r}"


async def rendered_log_lines(app: PulseApp, pilot) -> list[str]:
    """The log pane as drawn: every line's segments, scrolled through page by page."""
    pane = app.query_one(LogPane)
    height = pane.scrollable_content_region.height
    drawn: dict[int, str] = {}
    for top in range(0, pane.line_count, height):
        pane.scroll_to(y=top, animate=False, immediate=True)
        await pilot.pause()
        first = pane.scroll_offset.y  # the last page is clamped to the end
        for y in range(min(height, pane.line_count - first)):
            strip = pane.render_line(y)
            for segment in strip:
                assert_clean(segment.text, f"segment of drawn line {first + y}")
            drawn[first + y] = strip.text
    assert sorted(drawn) == list(range(pane.line_count))
    return [drawn[index] for index in range(pane.line_count)]



@pytest.mark.parametrize("where", ["local", "ssh"])
async def test_hostile_lines_never_reach_the_terminal_as_controls(where: str, request, tmp_path: Path) -> None:
    """Every escape is stripped, every line still shown, the 10 MB line cut and marked, the name of a hostile file made safe."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "train_20260101-0900.log"
    log.write_bytes(b"")
    target_config = request.getfixturevalue("own_sshd").target_config() if where == "ssh" else None
    config = Config(
        run=RunConfig(name="hostile", log=str(logs / "train_{started}.log"), match=r"^no-such-run-\d+$"),
        gpus=GpuConfig(source="none", poll_s=0.5),
        **({"target": target_config} if target_config else {}),
    )
    target = make_target(config.target) if target_config else LocalTarget()
    state = RunState()
    app = PulseApp(config, state, monitor_factory=lambda changed: Monitor(config, target, state, changed))
    app.animation_level = "none"
    lines, escapes = hostile_lines(seed=7, count=120)
    try:
        async with app.run_test(size=(160, 60)) as pilot:
            # The follower starts 1 MiB before the end of a file: let it open the log before the 10 MB line comes.
            await until(lambda: state.log_path == str(log), "the follower to open the log")
            await append(log, b"\n".join(lines) + b"\n")
            await append(log, b"before the long line\n" + b"\x1b[31m" + b"x" * TEN_MB)
            await append(log, b" end of the long line\nafter the long line\n")
            await until(lambda: state.lines_received >= len(lines) + 3, f"{len(lines) + 3} lines (have {state.lines_received})")
            # A newer log whose very name carries an escape sequence (file names are untrusted too).
            newer = logs / "train_20260101-1000\x1b]0;PWNED-TITLE\x07[b]x[link=y].log"
            await append(newer, b"\x1b[2Jfrom the newer log\n")
            await until(lambda: state.lines_received >= len(lines) + 4, "the newer log's line")
            app.run_screen.flush_log()
            await pilot.pause()

            received = list(state.lines)
            assert [line.text.split(" ")[1] for line in received[: len(lines)]] == [str(n) for n in range(len(lines))]
            for line in received:
                assert_clean(line.text, f"line {line.number}")
                assert all(unicodedata.category(char) != "Cc" for char in line.text)
            long_line = received[len(lines) + 1]
            assert long_line.cut and set(long_line.text) == {"x"}
            assert [line.text for line in received[len(lines) + 2 :]] == ["after the long line", "from the newer log"]
            assert not any(line.cut for line in received if line is not long_line)

            drawn = await rendered_log_lines(app, pilot)
            assert len(drawn) == len(received)
            marked = [index for index, text in enumerate(drawn) if text[:GUTTER].endswith(CUT_MARK)]
            assert marked == [len(lines) + 1], "the cut line (and only it) is marked in the gutter"

            screen = app.export_screenshot()
            assert_clean(screen.replace("\n", " "), "the exported screen")
            assert app.title == "Pulse"
            for event in state.events:
                assert_clean(event.text, f"event {event.kind}")
            title = app.query_one("#log-box").border_title or ""
            assert_clean(title, "the log pane's title")
            assert "train_20260101-1000[b]x[link=y].log" in screen.replace("&#160;", " "), "markup in a file name is shown literally"
    finally:
        await target.close()
    record_figure("hostile_text", where=where, lines=len(received), escapes=escapes + 2, long_line_bytes=TEN_MB)
