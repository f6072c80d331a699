"""`pulse classify [FILE] [--config CFG]`: log lines in, one JSON object per line out.

The same path the console takes for every log line (bytes → sanitize → LineReader, which
classifies each line and gives a line that continues a problem's block the block's kind),
so it doubles as a way to test a config's [metrics] patterns against a real log.
Output is flushed per chunk read, so it works at the end of a pipe (`tail -F log | pulse classify`).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import cast

from console.model import MetricPattern
from console.observe.lines import LineReader
from console.observe.textsafe import sanitize, split_lines
from console.user_patterns import MetricPatterns

_CHUNK = 1 << 16


def run_classify(args: argparse.Namespace) -> int:
    """Classify FILE (or standard input); 0 when done, 2 for a missing file or a bad config."""
    patterns: tuple[MetricPattern, ...] = ()
    if args.config:
        from console.config import ConfigError, load_config

        try:
            patterns = load_config(args.config).metrics.patterns
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return 2
    if args.file is None:
        return _classify_stream(cast(io.BufferedReader, sys.stdin.buffer), patterns)  # typeshed: BinaryIO; it is one
    try:
        stream = open(args.file, "rb")
    except FileNotFoundError:
        print(f"pulse classify: {args.file}: no such file", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pulse classify: {args.file}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    with stream:
        return _classify_stream(stream, patterns)


def _classify_stream(stream: io.BufferedReader, patterns: tuple[MetricPattern, ...]) -> int:
    out = sys.stdout
    reader = LineReader(MetricPatterns(patterns, on_disabled=_say_disabled))
    rest = b""
    # A reader that goes away (`| head`) ends this with BrokenPipeError, which `pulse` turns into a quiet exit.
    while True:
        chunk = stream.read1(_CHUNK)
        if not chunk:
            break
        lines, rest = split_lines(rest + chunk)
        if lines:
            out.write(_render(lines, reader))
            out.flush()
    if rest:
        out.write(_render([rest], reader))
        out.flush()
    return 0


def _say_disabled(notice: str) -> None:
    """A config pattern disabled on the way (past its time budget), said on stderr."""
    print(f"pulse classify: {notice}", file=sys.stderr, flush=True)


def _render(lines: list[bytes], reader: LineReader) -> str:
    """The lines as JSON."""
    return "".join(json.dumps(reader.read(sanitize(raw)[0]).as_json()) + "\n" for raw in lines)
