"""Textual's terminal driver, with an input thread that sleeps until there is input.

Textual's own input thread wakes ten times a second to see whether it should stop and whether a
lone escape has waited long enough to be a key: ~0.1 % of a core on a console left open for days,
as much as the rest of its idle drawing of a log line. This one waits on the terminal and on a
pipe written when it must stop, with a timeout only while the key parser has one pending.

A terminal that hung up (its window closed) answers reads and writes with EIO: the input then
ends, and what is written is dropped (Textual's writer thread would die on it, and its full
queue then block the console's exit; console/ui/start.py `SignalEnding` ends the console).
"""

from __future__ import annotations

import os
import selectors
import sys
from codecs import getincrementaldecoder
from threading import Event
from typing import TextIO

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class WakingEvent(Event):
    """An Event that also writes a byte to a pipe when set, for a thread blocked in select."""

    def __init__(self) -> None:
        super().__init__()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)

    def set(self) -> None:
        super().set()
        try:
            os.write(self.wake_write, b"\0")
        except OSError:  # a full pipe (BlockingIOError) wakes the thread as well; a closed one has none to wake
            pass

    def drain(self) -> None:
        try:
            while os.read(self.wake_read, 64):
                pass
        except OSError:  # emptied (BlockingIOError), or closed
            pass

    def close(self) -> None:
        """Close the pipe, once: its numbers are forgotten, so that nothing reads or writes another file that took them."""
        for fd in (self.wake_read, self.wake_write):
            if fd >= 0:
                os.close(fd)
        self.wake_read = self.wake_write = -1


class TerminalOutput:
    """What Textual's writer thread writes the frames to: the terminal's descriptor, each write
    whole, until one fails (EIO: the terminal hung up); from then on, nothing."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.failed = False

    def fileno(self) -> int:
        return self.stream.fileno()

    def write(self, text: str) -> None:
        data = memoryview(text.encode(self.stream.encoding, self.stream.errors or "strict"))
        try:
            while data and not self.failed:
                data = data[os.write(self.fileno(), data) :]
        except OSError:
            self.failed = True

    def flush(self) -> None:
        """Nothing is held back: each write went out whole."""


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = WakingEvent()
        assert sys.__stderr__ is not None  # LinuxDriver's output, as it is Textual's
        self._file = TerminalOutput(sys.__stderr__)  # type: ignore[assignment]  # the writer thread needs write, flush and fileno

    def close(self) -> None:
        super().close()
        exit_event = self.exit_event
        assert isinstance(exit_event, WakingEvent)
        exit_event.close()

    def run_input_thread(self) -> None:
        exit_event = self.exit_event
        assert isinstance(exit_event, WakingEvent)
        exit_event.drain()  # a wake-up left from the last stop (suspend and resume start the thread again)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        # select(2), as Textual's own driver: epoll refuses a stdin that is /dev/null or a file.
        with selectors.SelectSelector() as selector:
            selector.register(self.fileno, selectors.EVENT_READ)
            selector.register(exit_event.wake_read, selectors.EVENT_READ)
            while not exit_event.is_set():
                # Only a part-read escape sequence has a deadline: after it, it is keys on its own.
                deadline = parser._timeout_time
                for key, _ in selector.select(None if deadline is None else max(deadline - get_time(), 0.0)):
                    if key.fd == exit_event.wake_read:
                        exit_event.drain()
                        continue
                    try:
                        data = os.read(self.fileno, 4096)
                    except OSError:  # EIO: the terminal hung up
                        data = b""
                    if not data:  # end of input (stdin piped, not a terminal, or hung up): nothing more to wait for
                        selector.unregister(self.fileno)
                        continue
                    text = decode(data)
                    if text:  # a character's first bytes decode to nothing until the rest arrives; "" is the parser's end of input
                        for event in parser.feed(text):
                            self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
