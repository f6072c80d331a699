"""Follow the run's log on a target: every line exactly once, across rotations and reconnects.

A small program (follow_agent.py) runs on the target, reads the file by byte offset in
large chunks and sends them framed; this side splits lines, makes them safe, classifies
them and hands them on in one batch per chunk. When the channel or the connection is lost
the agent is started again at the offset of the last complete line in the same file
(found again by inode, even after a rotation renamed it), so nothing is lost or repeated.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from console.backoff import Backoff
from console.config import Config
from console.model import Event, LineInfo, LogLine, LogStatus, ProgressLine, file_kind
from console.observe import follow_agent, progress
from console.observe.lines import LineReader
from console.user_patterns import MetricPatterns
from console.observe.protocol import Hello, ProtocolError, check_hello
from console.observe.textsafe import sanitize, sanitize_styled, split_lines
from console.remote.program import open_program, program_source, reap
from console.remote.target import Target, TargetError
from console.stall import writes_in

AGENT_SOURCE = program_source(follow_agent)
AGENT_NAME = follow_agent.PROGRAM
MAX_LINE_BYTES = 16 * 1024
BACKLOG_BYTES = 1 << 20
READ_SIZE = 1 << 20
HEAD_BYTES = follow_agent.HEAD
MAX_HEADER_BYTES = 65536
#: The largest frame the agent sends: held reads merged into one (HOLD_BYTES) plus the read that passed it.
MAX_FRAME_BYTES = follow_agent.HOLD_BYTES + follow_agent.CHUNK
#: Waits before starting the agent again after a loss (seconds): the first, and the longest.
#: The SSH layer does its own backoff.
RETRY_FIRST_S, RETRY_MAX_S = 0.2, 5.0
#: How often the agent looks for new lines: a line reaches the screen within two frames.
FOLLOW_POLL_S = 0.05
#: The longest stretch of line work between two yields to the event loop (the UI shares it).
SLICE_S = 0.01
#: Turns of the loop at each yield: in a turn every task that is ready runs once, and a key's
#: effect reaches the screen through several tasks in turn (the app, the widget it changed, the
#: screen, the screen's frame timer). With one, a key waited behind a slice at each step.
TURNS_PER_YIELD = 4

LinesCallback = Callable[[list[LogLine]], None]
ProgressCallback = Callable[[ProgressLine | None], None]
EventCallback = Callable[[Event], None]


class FollowProtocolError(ProtocolError):
    """The agent's output did not follow the framing (a bug, or something else wrote to its stdout)."""


#: The fields of each frame (follow_agent.py's docstring): a frame without one is refused, never read as 0.
FRAME_FIELDS: dict[str, tuple[str, ...]] = {
    "hello": ("program", "protocol", "python", "pynvml"),
    "open": ("path", "inode", "size", "offset", "pid", "head"),
    "data": ("path", "inode", "offset", "len", "age"),
    "truncated": ("path", "inode", "size", "offset"),
    "rotated": ("path", "inode", "new_inode", "lost"),
    "replaced": ("path", "inode", "new_path", "new_inode"),
    "missing": ("path",),
    "not_file": ("path", "mode"),
    "idle": ("path", "inode", "offset", "size", "mtime"),
}


def check_frame(header: dict) -> str:
    """The event a frame header names, when it is a known one with all its fields; FollowProtocolError otherwise."""
    ev = header["ev"]
    if ev not in FRAME_FIELDS:
        raise FollowProtocolError(f"log follower sent an unknown frame {sanitize(ev, 40)[0]!r}")
    missing = [name for name in FRAME_FIELDS[ev] if name not in header]
    if missing:
        raise FollowProtocolError(f"log follower sent a {ev} frame without {', '.join(missing)}")
    return ev


def log_pattern(log: str) -> str:
    """The glob the agent follows for a configured log path: `{started}` matches any timestamp."""
    return log.replace("{started}", "*")


class _Frames:
    """Splits the agent's stdout into (header, payload) frames.

    A login shell's profile may print to stdout before the agent starts (a banner, conda's
    notices): lines before the first frame that are not headers are skipped, up to a bound.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._header: dict | None = None
        self._synced = False
        self._skipped = 0

    def feed(self, data: bytes) -> list[tuple[dict, bytes]]:
        self._buffer += data
        frames: list[tuple[dict, bytes]] = []
        while True:
            if self._header is None:
                end = self._buffer.find(b"\n")
                if end < 0:
                    if len(self._buffer) > MAX_HEADER_BYTES:
                        raise FollowProtocolError("log follower sent a header line over 64 KiB")
                    return frames
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                header = _header(line)
                if header is None:
                    self._skipped += end + 1
                    if self._synced or self._skipped > MAX_HEADER_BYTES:
                        raise FollowProtocolError(f"log follower sent an unreadable header: {line[:80]!r}")
                    continue
                if header.get("len", 0) > MAX_FRAME_BYTES:
                    raise FollowProtocolError(
                        f"log follower announced a frame of {header['len']} bytes, over {MAX_FRAME_BYTES >> 20} MiB"
                    )
                self._synced = True
                self._header = header
            size = self._header.get("len", 0)
            if len(self._buffer) < size:
                return frames
            payload = bytes(self._buffer[:size])
            del self._buffer[:size]
            frames.append((self._header, payload))
            self._header = None


def _header(line: bytes) -> dict | None:
    """A frame header, or None when `line` is not one."""
    try:
        header = json.loads(line)
    except ValueError:
        return None
    if not isinstance(header, dict) or not isinstance(header.get("ev"), str):
        return None
    if not isinstance(header.get("len", 0), int) or header.get("len", 0) < 0:
        return None
    return header


class LogFollower:
    """Follows `config.run.log` on `target` and calls `on_lines` with each batch of new lines.

    `on_event` receives an Event(kind="log") for each thing that happened to the file or the
    follower; `data["ev"]` names it: open, truncated, rotated, replaced, missing, not_file,
    disconnected, and idle (a heartbeat every few seconds, for liveness rather than the
    event ring). `status` is the file as last seen.

    `on_progress` receives the redraw a progress bar shows now (the unfinished last line after
    its last `\r`), at most once per chunk read, and None once that line is finished or left.
    Every line and redraw carries the time it was written (the file's mtime when read).
    """

    def __init__(
        self,
        target: Target,
        config: Config,
        on_lines: LinesCallback,
        *,
        on_event: EventCallback | None = None,
        on_progress: ProgressCallback | None = None,
        on_read: Callable[[int, int], None] | None = None,
        on_pattern_disabled: Callable[[str], None] | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        backlog_bytes: int | None = BACKLOG_BYTES,
        poll_s: float = FOLLOW_POLL_S,
        batch_s: float = follow_agent.BATCH_S,
        hold_s: float = 0.0,
        heartbeat_s: float = 5.0,
    ) -> None:
        """`backlog_bytes`: start that far before the end of the file (None: from its start);
        `batch_s`, `hold_s`: the agent's least time between two reads, and how long it holds what it
        read to send it in one message (follow_agent.Output); `on_read(bytes, writes)`: each stretch
        of the log read, with the writes (line ends, redraws) it holds (console.stall's rhythm estimate);
        `on_pattern_disabled(notice)`: a config pattern ran past its time budget and is no longer run."""
        if not config.run.log:
            raise ValueError(f"{config.source}: [run] log is not set; name the training log's path")
        self.target = target
        self.config = config
        self.pattern = log_pattern(config.run.log)
        self.on_lines = on_lines
        self.on_event = on_event
        self.on_progress = on_progress
        self.on_read = on_read
        self._showing_progress = False
        self.max_line_bytes = max_line_bytes
        self.poll_s = poll_s
        self.batch_s = batch_s
        self.hold_s = hold_s
        self.heartbeat_s = heartbeat_s
        self.stale_s = 3 * heartbeat_s + 5.0 + hold_s
        """No frame for this long (heartbeats included, and frames held by the agent) means the link is
        dead even if TCP has not noticed."""
        self.status = LogStatus(self.pattern, exists=False)
        self.agent_pid: int | None = None
        """The agent's PID as seen on the target (inside its container, if any)."""
        self.hello: Hello | None = None
        """What the running agent said of itself (its Python version), once it has."""
        self._path: str | None = None
        self._inode = 0
        self._received = -backlog_bytes if backlog_bytes else 0
        self._partial = bytearray()
        self._skipping = False
        self._number = 0
        self._patterns = MetricPatterns(config.metrics.patterns, on_disabled=on_pattern_disabled)
        self._reader = LineReader(self._patterns)
        """Reads each line in the block it continues (a traceback's frames take its kind)."""
        self._slice_started = 0.0
        self._requested: tuple[int, int] = (0, 0)
        self._head = bytearray()
        """The file's first bytes (up to HEAD_BYTES): with the inode they name the file across restarts."""

    @property
    def path(self) -> str | None:
        """The file being followed, once the agent has opened one."""
        return self._path

    @property
    def inode(self) -> int:
        return self._inode

    @property
    def pending_bytes(self) -> int:
        """Bytes held of an unfinished last line: never more than `max_line_bytes`."""
        return len(self._partial)

    @property
    def offset(self) -> int:
        """Where a restarted agent resumes: the end of the last complete line (or of the skipped part of a cut one).

        Negative before the first file is opened: the backlog to start with, counted from the end.
        """
        return self._received if self._skipping else self._received - len(self._partial)

    # -- the loop --------------------------------------------------------------

    async def run(self) -> None:
        """Follow until cancelled, starting the agent again whenever it or its channel is lost."""
        backoff = Backoff(RETRY_FIRST_S, RETRY_MAX_S)
        while True:
            try:
                reason = await self._follow_once()
            except TargetError as exc:
                reason = str(exc)
            except asyncio.TimeoutError:
                reason = f"no word from the log follower for {self.stale_s:g} s"
            except ProtocolError as exc:
                reason = str(exc)
            if self.agent_pid is not None:
                backoff.reset()  # it got as far as opening the file: a fresh loss, retry quickly
            self.agent_pid = None
            delay = backoff.next()
            self._emit(
                f"log follower stopped: {reason}; restarting in {delay:.2f} s",
                {"ev": "disconnected", "reason": reason},
            )
            await asyncio.sleep(delay)

    async def _follow_once(self) -> str:
        """One agent's life; returns why it ended."""
        start = self.offset
        self._requested = (self._inode, start)
        args = [
            f"--path={self.pattern}",
            f"--offset={start}",
            f"--inode={self._inode}",
            f"--poll={self.poll_s:g}",
            f"--batch={self.batch_s:g}",
            f"--hold={self.hold_s:g}",
            f"--heartbeat={self.heartbeat_s:g}",
            f"--head={self._head.hex()}",
        ]
        channel = await open_program(
            self.target, AGENT_SOURCE, args, name=AGENT_NAME, python=self.target.python
        )
        frames = _Frames()
        self.hello = None
        try:
            while True:
                async with asyncio.timeout(self.stale_s):
                    data = await channel.read(READ_SIZE)
                if not data:
                    break
                for header, payload in frames.feed(data):
                    await self._handle(header, payload)
                # A buffered read returns without suspending: under a flood this loop would hold
                # the event loop from chunk to chunk and keep the keys waiting.
                await self._yield_turns()
            async with asyncio.timeout(self.stale_s):
                status = await channel.wait()
        finally:
            channel.close()
            await reap(channel)
        said = sanitize(getattr(channel, "stderr", "").strip().rpartition("\n")[2], 200)[0]
        return f"it exited with status {status}" + (f" ({said})" if said else "")

    # -- frames ----------------------------------------------------------------

    async def _handle(self, header: dict, payload: bytes) -> None:
        ev = check_frame(header)
        if ev == "hello" or self.hello is None:
            self.hello = check_hello(header, follow_agent.PROGRAM, follow_agent.PROTOCOL)
            return
        if ev == "data":
            if header["inode"] != self._inode or header["offset"] != self._received:
                raise FollowProtocolError(
                    f"follower sent bytes at {header['offset']} of inode {header['inode']}, "
                    f"expected {self._received} of inode {self._inode}"
                )
            if len(self._head) < HEAD_BYTES and self._received <= len(self._head) < self._received + len(payload):
                self._head += payload[len(self._head) - self._received : HEAD_BYTES - self._received]
            self._received += len(payload)
            if self.on_read is not None:
                self.on_read(len(payload), writes_in(payload))
            now, start = time.monotonic(), 0
            for length, age in _reads(header, len(payload)):
                written = now - age
                await self._deliver(self._split(payload[start : start + length]), written)
                start += length
            self._report_progress(written)
            return
        if ev == "open":
            self._open(header)
        elif ev in ("truncated", "rotated", "replaced"):
            self._end_of_file()
            self._reader.clear()
            self._report_progress(time.monotonic())
            if ev == "truncated":
                self._received = 0
                self._head.clear()
        elif ev == "missing":
            self.status = LogStatus(header["path"], exists=False)
        elif ev == "not_file":
            self.status = LogStatus(header["path"], exists=True, kind=_kind(header["mode"]))
        elif ev == "idle":
            self.status = LogStatus(
                header["path"],
                exists=self._inode != 0,
                size=header["size"],
                mtime=header["mtime"],
                inode=self._inode,
            )
        self._emit(_describe(header), header)

    def _open(self, header: dict) -> None:
        inode, offset = header["inode"], header["offset"]
        if self._requested[0] and (inode, offset) == self._requested:
            # The same file where we left it: a partial line will be sent again whole.
            if not self._skipping:
                self._partial.clear()
        else:
            self._end_of_file()
        head = bytes.fromhex(header["head"])
        if inode != self._inode or len(head) > len(self._head):
            self._head = bytearray(head)
        self._path, self._inode, self._received = header["path"], inode, offset
        self.agent_pid = header["pid"]
        self.status = LogStatus(self._path, exists=True, size=header["size"], inode=inode)

    def _end_of_file(self) -> None:
        """The file ended or was left: its unfinished last line will never be completed."""
        if self._partial and not self._skipping:
            self.on_lines([self._line(bytes(self._partial), time.monotonic())])
        self._partial.clear()
        self._skipping = False

    # -- lines -----------------------------------------------------------------

    def _split(self, chunk: bytes) -> list[tuple[bytes, bool]]:
        """The lines `chunk` completes, raw, each with whether it was cut at the bound."""
        out: list[tuple[bytes, bool]] = []
        if self._skipping:
            end = chunk.find(b"\n")
            if end < 0:
                return out
            chunk = chunk[end + 1 :]
            self._skipping = False
        if self._partial:
            end = chunk.find(b"\n")
            if end < 0:
                self._extend_partial(chunk, out)
                return out
            out.append((bytes(self._partial) + chunk[:end], False))
            self._partial.clear()
            chunk = chunk[end + 1 :]
        lines, rest = split_lines(chunk)
        out.extend((raw, False) for raw in lines)
        if rest:
            self._extend_partial(rest, out)
        return out

    def _extend_partial(self, data: bytes, out: list[tuple[bytes, bool]]) -> None:
        """Hold an unfinished line, never more than the bound: an over-long one is cut and its rest skipped."""
        self._partial += data
        if len(self._partial) <= self.max_line_bytes:
            return
        # A progress bar redraws after \r without a newline: earlier redraws are superseded.
        redraw = self._partial.rfind(b"\r")
        if redraw > 0 and len(self._partial) - redraw <= self.max_line_bytes:
            del self._partial[:redraw]
            return
        out.append((bytes(self._partial[: self.max_line_bytes]), True))
        self._partial.clear()
        self._skipping = True

    def _report_progress(self, written: float) -> None:
        """Hand on the bar's latest redraw, or None when the line that held one is finished."""
        if self.on_progress is None:
            return
        redraw = None
        if not self._skipping and b"\r" in self._partial:
            text = sanitize(bytes(self._partial), self.max_line_bytes)[0]
            if text.strip():
                redraw = progress.progress_line(text, written, self._patterns)
        if redraw is not None or self._showing_progress:
            self._showing_progress = redraw is not None
            self.on_progress(redraw)

    async def _deliver(self, raws: list[tuple[bytes, bool]], written: float) -> None:
        """Make lines of `raws`, written at `written`, and hand them on: one batch, or one per SLICE_S
        of work so the loop stays responsive."""
        batch: list[LogLine] = []
        for raw, cut in raws:
            batch.append(self._line(raw, written, cut=cut))
            if len(batch) % 64 == 0 and time.perf_counter() - self._slice_started > SLICE_S:
                self.on_lines(batch)
                batch = []
                await self._yield_turns()
        if batch:
            self.on_lines(batch)

    async def _yield_turns(self) -> None:
        """Let the tasks waiting on the loop run, and what they hand on, before more line work
        (a slice counts from here, across the reads and frames of a chunk)."""
        for _ in range(TURNS_PER_YIELD):
            await asyncio.sleep(0)
        self._slice_started = time.perf_counter()

    def _line(self, raw: bytes, now: float, *, cut: bool = False) -> LogLine:
        text, shortened, sgr = sanitize_styled(raw, self.max_line_bytes)
        info: LineInfo = self._reader.read(text)
        self._number += 1
        return LogLine(self._number, text, info, cut or shortened, now, sgr)

    def _emit(self, text: str, data: dict) -> None:
        if self.on_event is not None:
            self.on_event(Event(time.monotonic(), "log", text, data))


def _age(age: object) -> float:
    """An `age` a data frame gives its bytes: seconds since the file was written (0 when out of range)."""
    return float(age) if isinstance(age, (int, float)) and 0.0 <= age < 1e9 else 0.0


def _reads(header: dict, size: int) -> list[tuple[int, float]]:
    """(length, age) of each read a data frame carries: its `ages` when they add up to its bytes
    (a held batch), else all of it at `age`."""
    ages = header.get("ages")
    if isinstance(ages, list) and ages:
        try:
            reads = [(int(length), _age(age)) for length, age in ages]
        except (TypeError, ValueError):
            reads = []
        if reads and all(length > 0 for length, _ in reads) and sum(length for length, _ in reads) == size:
            return reads
    return [(size, _age(header["age"]))]


def _kind(mode: object) -> str:
    """What a `not_file` frame's st_mode names (model.file_kind); a mode that is not a number names nothing known."""
    return file_kind(mode) if isinstance(mode, int) and not isinstance(mode, bool) else "special file"


def _describe(header: dict) -> str:
    """One line for the operator; paths come from the target, so they are made safe too."""
    ev = header["ev"]
    path = sanitize(str(header["path"]), 300)[0]
    if ev == "open":
        return f"following {path} from byte {header['offset']}"
    if ev == "truncated":
        return f"{path} was truncated to {header['size']} bytes; reading it again from the start"
    if ev == "rotated":
        if header["lost"]:
            return (
                f"{path} was rotated, rewritten or deleted while the follower was down; "
                "reading the file there now from its start (the old file's unread end is lost)"
            )
        return f"{path} was rotated; read the old file to its end, now following the new one"
    if ev == "replaced":
        new_path = sanitize(str(header["new_path"]), 300)[0]
        return f"a newer log appeared: now following {new_path} (finished {path})"
    if ev == "missing":
        return f"{path} does not exist; waiting for it to appear"
    if ev == "not_file":
        return f"{path} is a {_kind(header['mode'])}, not a log file: not read; waiting for a file there (check --log)"
    return f"{path}: {header['size']} bytes, nothing new"
