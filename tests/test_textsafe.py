"""sanitize() must never let a control sequence through, never crash, and keep what a person would read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.observe.textsafe import sanitize, sanitize_styled, split_lines

H200 = Path(__file__).parent / "fixtures" / "h200"
UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"step 1 | loss 2.31 | 14.2K tok/s", "step 1 | loss 2.31 | 14.2K tok/s"),
        (b"\x1b[31mred\x1b[0m plain", "red plain"),
        (b"\x1b[1;38;5;208mbold orange\x1b[K", "bold orange"),
        (b"a\x1b]52;c;cm0gLXJmIH4=\x07b", "ab"),  # OSC 52: write the clipboard
        (b"a\x1b]0;owned title\x1b\\b", "ab"),  # OSC 0 with ST
        (b"a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),  # OSC 8 hyperlink
        (b"x\x1bP1$tpayload\x1b\\y", "xy"),  # DCS
        (b"x\x1bXsos\x1b\\y\x1b^pm\x1b\\z\x1b_apc\x1b\\w", "xyzw"),  # SOS, PM, APC
        (b"x\x1b]2;title never terminated", "x"),
        (b"\xc2\x9b31mred", "red"),  # 8-bit CSI, as UTF-8
        (b"\xc2\x9d0;title\xc2\x9cafter", "after"),  # 8-bit OSC ... 8-bit ST
        (b"a\xc2\x85b\xc2\x8dc", "abc"),  # other C1 controls (NEL, RI)
        (b"\x1bcreset\x1b7saved\x1b(Bcharset", "resetsavedcharset"),
        (b"ends with escape\x1b", "ends with escape"),
        (b"a\x00b\x07c\x08d\x7fe", "abcde"),
        (b"col1\tcol2", "col1    col2"),
        (b"\r  5%|5         | 5/100\r 10%|#         | 10/100", " 10%|#         | 10/100"),
        (b"\x1b[2K\r 50%|#####     | 50/100\r", " 50%|#####     | 50/100"),
        (b"windows line\r", "windows line"),
        (b"progress 10%\r   \r", "progress 10%"),
        (b"\r", ""),
        (b"", ""),
        (b"caf\xc3\xa9 \xe2\x96\x88 ok", "caf\u00e9 \u2588 ok"),
        (b"\xff\xfe broken utf-8 \xc3", "\ufffd\ufffd broken utf-8 \ufffd"),
        (b"\x9b31m raw 8-bit csi", "\ufffd31m raw 8-bit csi"),  # not UTF-8: shown inert
        (b"abc\xe2\x80\xaeevil\xe2\x80\xac", "abcevil"),  # bidi override
    ],
)
def test_sanitize_strips_controls_and_keeps_text(raw: bytes, expected: str) -> None:
    assert sanitize(raw) == (expected, False)


def test_str_input_is_treated_like_bytes() -> None:
    assert sanitize("\x1b[32mok\x1b[0m\tdone") == ("ok      done", False)


def test_long_line_is_cut_and_flagged() -> None:
    text, cut = sanitize(b"x" * 5000)
    assert (len(text), cut) == (4096, True)
    assert sanitize(b"y" * 10, max_len=4) == ("yyyy", True)
    assert sanitize(b"\x1b[1m" + b"z" * 50, max_len=20) == ("z" * 20, True)


def test_endless_progress_bar_keeps_latest_redraw() -> None:
    raw = b"".join(b"\r%3d%%|bar| %d/100000" % (i % 100, i) for i in range(100_000))
    text, cut = sanitize(raw)
    assert text == " 99%|bar| 99999/100000"
    assert cut


def test_h200_log_capture_lines_are_unchanged() -> None:
    for line in (H200 / "hung.log").read_bytes().splitlines():
        assert sanitize(line) == (line.decode(), False)


@given(st.binary(max_size=300))
def test_no_control_character_survives_any_bytes(raw: bytes) -> None:
    text, _ = sanitize(raw)
    assert not UNSAFE.search(text)
    assert "\t" not in text


@given(st.text(max_size=300))
def test_no_control_character_survives_any_text(raw: str) -> None:
    text, cut = sanitize(raw, max_len=100)
    assert not UNSAFE.search(text)
    assert len(text) <= 100
    if cut:
        assert len(raw) > 100


def test_split_lines_keeps_the_unfinished_rest() -> None:
    assert split_lines(b"a\nb\r\nc") == ([b"a", b"b\r"], b"c")
    assert split_lines(b"a\n") == ([b"a"], b"")
    assert split_lines(b"partial") == ([], b"partial")
    assert split_lines(b"") == ([], b"")


def test_colours_are_kept_as_spans_over_the_plain_text() -> None:
    """A rich/loguru-style line: the text as sanitize gives it, the SGR state of each stretch beside it."""
    raw = b"\x1b[32m2025-10-09 04:12:01.337\x1b[0m | \x1b[1m\x1b[31mERROR   \x1b[0m | train:step:88 - loss is nan"
    text, cut, spans = sanitize_styled(raw)
    assert (text, cut) == sanitize(raw)
    assert text == "2025-10-09 04:12:01.337 | ERROR    | train:step:88 - loss is nan"
    assert spans == ((0, 23, "32"), (26, 34, "1;31"))
    redraws = b"\x1b[38;5;208morange\x1b[0m\r\x1b[34mblue redraw"
    assert sanitize_styled(redraws) == (*sanitize(redraws), ())  # redraws: sanitize's text, no colours


def test_only_sgr_is_kept_and_other_sequences_still_go() -> None:
    text, _, spans = sanitize_styled(b"\x1b[31mred\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J still red\x1b[0m")
    assert text == "red still red" and spans == ((0, 13, "31"),)


@pytest.mark.parametrize(("raw", "expected"), [(b"\x1b[31mred\x1b[0m plain", "red plain"), (b"\x1b[1;38;5;208mbold orange\x1b[K", "bold orange")])
def test_styled_text_is_the_sanitized_text(raw: bytes, expected: str) -> None:
    assert sanitize_styled(raw)[0] == sanitize(raw)[0] == expected


PIECES = ["\x1b[", "\x9b", "31", ";", "m", "0", "\r", "\t", "\x07", "\x1b]", "a", " ", "\x00", "\u202e"]


@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_no_control_character_survives_styled(raw: str) -> None:
    text, cut, spans = sanitize_styled(raw, max_len=40)
    assert not UNSAFE.search(text) and len(text) <= 40
    for start, end, parameters in spans:
        assert 0 <= start < end <= len(text)
        assert re.fullmatch(r"[0-9;]+", parameters)
