"""Problems that span lines: a traceback, a chain of exceptions, a C++ abort with its stack (pure).

A problem is the lines an operator reads as one thing: a Python traceback from `Traceback (most
recent call last):` (or the `Exception in thread X:` that heads it) to its exception line, with the
tracebacks that "During handling of the above exception…" chains to it; a CUDA error with the advice
PyTorch prints after it; `terminate called…` with its `what():` and its frames. It is named by its
last line that says what went wrong (the exception line), never by the "Traceback" line.

Fed line by line, in order (ProblemSpans.add), with bounded memory: the problems are a ring buffer,
and a problem stays open to more lines only until MAX_GAP lines pass without one of its own.
torchrun's `[rank0]:` prefix makes each rank a stream of its own, so lines that other ranks or
threads write in between do not break a span. Lines are untrusted: only their shape is read.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from enum import Enum

from console.model import PROBLEM_KINDS, LineKind, LogLine

#: Lines that may pass without one of a problem's own before it is taken as finished.
MAX_GAP = 40
#: Lines a message block (torchrun's `=====` failure table) may hold.
MAX_BLOCK = 400
#: Streams (ranks) with a problem open at once; the oldest is finished to make room.
MAX_STREAMS = 64
#: The kinds, gravest first: a problem's kind is the gravest among its lines (an OOM chained
#: into a RuntimeError is still an OOM).
GRAVITY = {kind: rank for rank, kind in enumerate((
    LineKind.OOM, LineKind.CUDA_ERROR, LineKind.NCCL_TIMEOUT, LineKind.NAN, LineKind.KILLED, LineKind.TRACEBACK,
))}

_RANK_PREFIX = re.compile(r"\[(?:rank|default)\d+\]: ?")
_THREAD_DIED = re.compile(r"Exception in thread (.+?)(?: \(\w+\))?:\s*$")
# Python's own, IPython's (`RuntimeError   Traceback (most recent call last)`) and rich's boxed one.
_TRACEBACK = "Traceback (most recent call last)"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# An exception's line: `KeyError: 'x'`, `torch.OutOfMemoryError: …`, `KeyboardInterrupt`, `_queue.Empty`.
# Each part can match one way only (a name holds no dot), so an untrusted 16 KiB word costs one pass.
_EXCEPTION = re.compile(r"(?:[A-Za-z_]\w*\.)*(?P<name>_?[A-Z]\w*)(?: \(see above for traceback\))?(?::|\s*$)")
# What PyTorch prints after a CUDA (or HIP) error's message.
_DEVICE_ADVICE = (
    "CUDA kernel errors might be asynchronously reported", "HIP kernel errors might be asynchronously reported",
    "For debugging consider passing", "Compile with `TORCH_USE_", "Device-side assertion tracking",
)
# A C++ exception's stack (c10::Error), which loses the rank prefix its first line had.
_NATIVE_STACK = ("Exception raised from ", "frame #")


@dataclass(slots=True)
class Problem:
    """One problem: its lines' span and the line that names it (grows while it is open)."""

    head: LogLine
    """Its first line."""
    last: int
    """Number of its last line (lines of other ranks or threads in between are not its own)."""
    name: LogLine
    """The line that says what went wrong: a traceback's exception line, else its first line."""
    kind: LineKind
    """The gravest kind among its lines."""
    thread: str | None = None
    """The thread whose uncaught exception this is ("Exception in thread NAME:")."""

    @property
    def first(self) -> int:
        """Number of its first line."""
        return self.head.number


class _Phase(Enum):
    HEAD = 1  # "Exception in thread X:", its traceback to come
    FRAMES = 2  # inside a traceback, before its exception line
    AFTER = 3  # the exception line came: a chain, the CUDA advice or a message block may follow
    CHAIN = 4  # "During handling…": the next traceback to come
    BLOCK = 5  # a message block between `=====` lines
    TAIL = 6  # a one-line problem, or a C++ abort: its what(), its stack, the CUDA advice may follow


@dataclass(slots=True)
class _Open:
    problem: Problem
    phase: _Phase
    seen: int
    """Number of the newest line that was its own (blank lines inside it are nobody's)."""
    block_from: int = 0


class ProblemSpans:
    """The problems of one log, built line by line."""

    def __init__(self, max_problems: int = 500) -> None:
        self.problems: deque[Problem] = deque(maxlen=max_problems)
        """Oldest first, ordered by first line; the newest ones may still grow."""
        self.open: dict[str, _Open] = {}
        """Per stream (a rank prefix, or ""), the problem that more lines may still join."""
        self._latest = ""

    def clear(self) -> None:
        self.problems.clear()
        self.open.clear()

    def add(self, line: LogLine) -> None:
        """One more line. Cheap for a line of no problem kind while no problem is open (the flood path)."""
        if not self.open and line.info.kind not in PROBLEM_KINDS:
            return
        number = line.number
        for stream in [s for s, o in self.open.items() if number - o.seen > MAX_GAP]:
            del self.open[stream]
        text = line.text
        stream, body = "", text
        if text.startswith("["):
            prefix = _RANK_PREFIX.match(text)
            if prefix:
                stream, body = prefix[0].rstrip(" "), text[prefix.end():]
        current = self.open.get(stream)
        if current is None and not stream and (body.startswith(_NATIVE_STACK) or line.info.continues):
            stream = self._latest  # the rest of a rank's error, printed without its prefix
            current = self.open.get(stream)
        if current is not None:
            if _continues(current, line, body):
                self._latest = stream
                return
            del self.open[stream]
        self._start(stream, line, body)

    def _start(self, stream: str, line: LogLine, body: str) -> None:
        kind = line.info.kind
        if kind not in PROBLEM_KINDS:
            return
        thread = _THREAD_DIED.match(body)
        problem = Problem(line, line.number, line, kind, thread[1] if thread else None)
        self.problems.append(problem)
        if thread:
            phase = _Phase.HEAD
        elif _TRACEBACK in body:
            phase = _Phase.FRAMES
        elif body.startswith(_CHAINED):
            phase = _Phase.CHAIN
        else:
            phase = _Phase.TAIL
        if len(self.open) >= MAX_STREAMS:
            del self.open[next(iter(self.open))]
        self.open[stream] = _Open(problem, phase, line.number)
        self._latest = stream


def _continues(span: _Open, line: LogLine, body: str) -> bool:
    """Whether `line` (`body`: without its rank prefix) belongs to the open problem `span`; if so, it joins it."""
    phase, problem = span.phase, span.problem
    if not body.strip():
        return phase is not _Phase.TAIL or line.number == span.seen + 1  # a blank line may sit inside
    if phase is _Phase.HEAD or phase is _Phase.FRAMES:
        if _TRACEBACK in body:
            if phase is _Phase.FRAMES:
                return False  # another traceback, not chained to this one
            return _join(span, line, _Phase.FRAMES)
        if body[0] in " \t│╰":
            return _join(span, line, _Phase.FRAMES)  # a frame, its source line, its ^^^^ marker (rich: in a box)
        exception = _EXCEPTION.match(body)
        if exception and not exception["name"].isupper():  # a logger's `INFO:` is no exception
            problem.name = line
            return _join(span, line, _Phase.AFTER)
        if line.info.kind in PROBLEM_KINDS:
            return False
        return True  # another thread's line, written in between: not the traceback's, nor its end
    if phase is _Phase.AFTER:
        if body.startswith(_CHAINED):
            return _join(span, line, _Phase.CHAIN)
        if body.startswith(_DEVICE_ADVICE):
            return _join(span, line, _Phase.AFTER)
        if body.startswith("==========") and not body.strip("="):
            span.block_from = line.number
            return _join(span, line, _Phase.BLOCK)
        # the reader (LineReader) found it continues the exception's block: its message's next line
        return line.info.continues and _join(span, line, _Phase.AFTER)
    if phase is _Phase.CHAIN:
        return _TRACEBACK in body and _join(span, line, _Phase.FRAMES)
    if phase is _Phase.BLOCK:
        if line.number - span.block_from > MAX_BLOCK:
            return False
        ends = body.startswith("==========") and not body.strip("=")
        return _join(span, line, _Phase.AFTER if ends else _Phase.BLOCK)
    # TAIL: a C++ abort's what() names it; its stack and the CUDA advice are part of it, and so is
    # a line of the same kind right after it (the next line of the same message).
    if body.lstrip().startswith("what():"):
        if line.info.kind in PROBLEM_KINDS:
            problem.name = line
        return _join(span, line, _Phase.TAIL)
    if body.startswith(_NATIVE_STACK) or body.startswith(_DEVICE_ADVICE):
        return _join(span, line, _Phase.TAIL)
    if line.info.continues:
        return _join(span, line, _Phase.TAIL)  # the next line of its block, as the reader read it
    return line.info.kind is problem.name.info.kind and line.number == span.seen + 1 and _join(span, line, _Phase.TAIL)


def _join(span: _Open, line: LogLine, phase: _Phase) -> bool:
    problem, kind = span.problem, line.info.kind
    problem.last = span.seen = line.number
    span.phase = phase
    if kind in GRAVITY and GRAVITY[kind] < GRAVITY[problem.kind]:
        problem.kind = kind
    return True
