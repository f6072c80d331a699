"""Make untrusted log bytes safe to put on a terminal.

A training log can hold anything: colour codes, tqdm's carriage-return redraws,
invalid UTF-8, and escape sequences that would set the window title, write the
clipboard (OSC 52) or move the cursor if passed through. `sanitize` turns one
raw line into plain printable text; `sanitize_styled` does the same and also returns the
line's own colours (SGR sequences only, as spans over the plain text, never the bytes);
`split_lines` cuts a received chunk into lines.

A command is never cleaned that way: what runs must be what is shown, so `visible` writes each
character a terminal would not print as itself as its escape instead of dropping it.
"""

from __future__ import annotations

import re

from console.observe.progress import is_redraw

#: The longest line kept, in characters; the rest is dropped and flagged.
MAX_LINE_CHARS = 4096

# Escape sequences, longest forms first. String sequences (OSC, DCS, SOS, PM, APC)
# run to their terminator; an unterminated one swallows the rest of the line,
# because its payload was never meant to be shown.
_ESCAPE_SEQUENCE = re.compile(
    r"""
      (?:\x1b\[|\x9b) [0-?]* [ -/]* [@-~]?          # CSI ... final byte
    | (?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])       # OSC, DCS, SOS, PM, APC
      .*? (?:\x07|\x1b\\|\x9c|$)                    # ... up to BEL or ST
    | \x1b [ -/]* [0-~]?                            # two-byte and nF escapes, or a lone ESC
    """,
    re.VERBOSE | re.DOTALL,
)

# What may not reach the terminal once escapes are gone: C0 controls (TAB is
# expanded before this runs), DEL, C1 controls, and the bidirectional overrides
# that can make a line read differently from what it says.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def sanitize(raw: bytes | str, max_len: int = MAX_LINE_CHARS) -> tuple[str, bool]:
    """One log line as safe, printable text, and whether it was cut at `max_len` characters.

    Invalid UTF-8 becomes U+FFFD; every terminal control sequence is removed;
    after a carriage return only the last redraw that has content is kept (tqdm);
    tabs become spaces.
    """
    if isinstance(raw, bytes):
        if raw.isascii():
            text = raw.decode("ascii")
        else:
            text = raw.decode("utf-8", errors="replace")
    else:
        text = raw
    if text.isascii() and text.isprintable():
        if len(text) > max_len:
            return text[:max_len], True
        return text, False
    return _clean(text, max_len)


def _clean(text: str, max_len: int) -> tuple[str, bool]:
    # A progress bar that never printed a newline is one huge line of redraws:
    # bound the work by the latest redraws, which are the ones worth keeping.
    budget = max_len * 8 + 1024
    cut = False
    if len(text) > budget:
        cut = True
        text = text[-budget:] if "\r" in text[-budget:] else text[:budget]
    if "\x1b" in text or not text.isascii():
        text = strip_escape_sequences(text)
    if "\r" in text:
        text = _last_redraw(text)
    if "\t" in text:
        text = text.expandtabs()
    text = _UNPRINTABLE.sub("", text)
    if len(text) > max_len:
        return text[:max_len], True
    return text, cut


#: Select Graphic Rendition: colours and attributes, the only sequence whose meaning is kept.
_SGR = re.compile(r"(?:\x1b\[|\x9b)([0-9;:]{0,64})m")

SgrSpan = tuple[int, int, str]
"""(start, end, parameters) over the plain text: `(0, 5, "1;31")` is bold red for its first 5 characters."""


def sanitize_styled(raw: bytes | str, max_len: int = MAX_LINE_CHARS) -> tuple[str, bool, tuple[SgrSpan, ...]]:
    """`sanitize`, and the SGR state of each stretch of the result as spans.

    The parameters are digits and separators only (the pattern admits nothing else), so a
    span can carry no other sequence. A line with carriage returns (a progress bar's redraws)
    is `sanitize`d without colours: which redraw it keeps is sanitize's business alone.
    """
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    if ("\x1b[" not in raw and "\x9b" not in raw) or "\r" in raw:
        return (*sanitize(raw, max_len), ())
    pieces = _SGR.split(raw)  # text, params, text, params, ..., text
    text, spans, params = "", [], ""
    cut = False
    for index, piece in enumerate(pieces):
        if index % 2:
            codes = piece.replace(":", ";")
            params = "" if codes in ("", "0") else f"{params};{codes}".lstrip(";")
            if len(params) > 128:  # a line that never resets: keep its latest setting, bounded
                params = codes
            continue
        clean, shortened = sanitize(piece, max_len * 8 + 1024)
        cut = cut or shortened
        if clean and params:
            spans.append((len(text), len(text) + len(clean), params))
        text += clean
    if len(text) > max_len:
        text, cut = text[:max_len], True
        spans = [(start, min(end, max_len), codes) for start, end, codes in spans if start < max_len]
    return text, cut, tuple(spans)


def strip_escape_sequences(text: str) -> str:
    """`text` without terminal escape sequences (CSI, OSC, DCS, SOS, PM, APC, 8-bit forms); nothing else changes."""
    return _ESCAPE_SEQUENCE.sub("", text)


def _last_redraw(text: str) -> str:
    """The text after the last carriage return that is followed by something visible; when that
    is not itself a progress bar's redraw (tqdm.write clears the bar, prints, draws it again), the
    bar's last redraw before it comes first, so its step and rate stay with the line."""
    visible = [segment for segment in text.split("\r") if segment.strip()]
    if not visible:
        return ""
    last = visible[-1]
    if len(visible) > 1 and is_redraw(visible[-2]) and not is_redraw(last):
        return f"{visible[-2].rstrip()} {last.lstrip()}"
    return last


#: The escapes `visible` writes for the controls commands most often hold; the rest as \xHH, \uHHHH.
_NAMED_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(char: str) -> str:
    code = ord(char)
    named = _NAMED_ESCAPES.get(char)
    if named:
        return named
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with every character that is not printable as itself written as its escape, as Python
    writes it (`\\r`, `\\n`, `\\t`, `\\x1b`, `\\x9b`, `\\u2028`, `\\u202e`…); nothing else changes.

    Not printable, by Python's `str.isprintable` (the space is): C0 and C1 controls, DEL, format
    characters (bidirectional overrides, zero-width ones), line and paragraph separators, spaces
    other than U+0020, unassigned code points. Escaped, a carriage return or an escape sequence can
    no longer draw one command over another. Backslashes are left as they are: commands are full
    of them, and `hidden_characters` says whether a `\\r` shown is one.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def hidden_characters(text: str) -> list[str]:
    """The escapes `visible` writes for `text`, each once, in order of first appearance; [] when none."""
    if text.isprintable():
        return []
    return list(dict.fromkeys(_escape(char) for char in text if not char.isprintable()))


def split_lines(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines of `buffer` (without their `\\n`) and the unfinished rest."""
    lines = buffer.split(b"\n")
    rest = lines.pop()
    return lines, rest
