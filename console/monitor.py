"""Monitor: keeps a RunState fed from a target for as long as the console is open.

It runs the sampler (processes, GPUs, the log's stat) and the log follower as asyncio
tasks, mirrors the target's connection state into the RunState, and starts a source again
with backoff whenever it ends: an agent killed, a channel closed, a connection dropped.
Nothing here blocks; `on_change` is called after each update so a UI can repaint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from console.backoff import Backoff
from console.config import Config
from console.model import ConnectionState, Event, LogLine, ProgressLine
from console.observe.follow import LogFollower
from console.observe.sampler import Sampler
from console.remote.target import Target, TargetError
from console.state import RunState

#: Waits before starting the sampler again after it ended; back to the first after a sample arrives.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 15.0
#: How long stop() waits for the sources to end after cancelling them.
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class LogPacing:
    """A fleet node's log: read at most every `read_s` (each read dated by its own writes, so the
    run's rhythm is kept) and sent every `send_s`, what was read meanwhile in one message."""

    read_s: float
    send_s: float


class Monitor:
    """Feeds `state` from `target` per `config` between `start()` and `stop()`."""

    def __init__(
        self,
        config: Config,
        target: Target,
        state: RunState,
        on_change: Callable[[], None] | None = None,
        *,
        log_pacing: LogPacing | None = None,
    ) -> None:
        self.config = config
        self.log_pacing = log_pacing
        """How a fleet's node reads and sends its log; None: each line as it comes."""
        self.target = target
        self.state = state
        self.on_change = on_change
        self.sampler_restarts = 0
        """How many times the sampler had to be started again."""
        self._tasks: list[asyncio.Task] = []
        self._running = False
        target.on_state(self._connection_changed)

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        """Start sampling and, when the config names a log, following it."""
        if self._running:
            return
        self._running = True
        self._spawn(self._sample_forever(), "sampler")
        if self.config.run.log:
            pacing = self.log_pacing
            paced: dict[str, Any] = {} if pacing is None else {"poll_s": pacing.read_s, "batch_s": pacing.read_s, "hold_s": pacing.send_s}
            follower = LogFollower(
                self.target, self.config, self._lines, on_event=self._log_event, on_progress=self._progress,
                on_read=self.state.note_read, on_pattern_disabled=self.state.disabled_patterns.append, **paced
            )
            self._spawn(follower.run(), "log follower")

    async def stop(self) -> None:
        """Stop every source; their remote helpers are hung up and exit."""
        self._running = False
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        # Bounded: a source stuck hanging up on a dead link must not hang the console's quit.
        _, stuck = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        for task in stuck:
            self.state.add_event("internal", f"{task.get_name()} did not stop within {STOP_TIMEOUT_S:g} s; left behind")

    def _spawn(self, work, what: str) -> None:
        task = asyncio.create_task(work, name=f"pulse {what}")
        task.add_done_callback(lambda done: self._task_ended(done, what))
        self._tasks.append(task)

    def _task_ended(self, task: asyncio.Task, what: str) -> None:
        """A source only ends by stop(); anything else is a bug the operator must hear about."""
        if task.cancelled():
            return
        error = task.exception()
        why = f"{type(error).__name__}: {error}" if error else "it returned"
        self.state.add_event("internal", f"the {what} stopped ({why}); restart the console")
        self._changed()

    # -- sources -----------------------------------------------------------------------------

    async def _sample_forever(self) -> None:
        backoff = Backoff(RETRY_FIRST_S, RETRY_MAX_S)
        while True:
            sampler = Sampler(self.target, self.config, on_problem=self._sampler_problem)
            try:
                async for sample in sampler.stream():
                    backoff.reset()
                    self.state.add_sample(sample)
                    self._changed()
                reason = "the sampling agent ended"
            except TargetError as exc:
                reason = str(exc)
            except (OSError, ValueError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            delay = backoff.next()
            self.sampler_restarts += 1
            self.state.agent_lost = reason
            self.state.add_event("sampler", f"sampling stopped: {reason}; restarting in {delay:.2f} s")
            self._changed()
            await asyncio.sleep(delay)

    def _sampler_problem(self, text: str) -> None:
        self.state.add_event("sampler", text)
        self._changed()

    def _lines(self, lines: list[LogLine]) -> None:
        self.state.add_lines(lines)
        self._changed()

    def _progress(self, progress: ProgressLine | None) -> None:
        """A bar's redraw is state, not news: held at once and drawn with the screen's next frame (a
        sample's, a line's or the second's tick: redrawn up to ten times a second, it is read once a
        second, as nvitop and top refresh). A bar that appears or ends is news."""
        shown = self.state.progress is not None
        self.state.set_progress(progress)
        if shown != (progress is not None):
            self._changed()

    def _log_event(self, event: Event) -> None:
        ev = event.data.get("ev")
        if ev == "idle":
            return  # a heartbeat, not news
        path = event.data.get("new_path") if ev == "replaced" else event.data.get("path")
        if ev in ("open", "replaced") and path and path != self.state.log_path:
            self.state.start_new_log(path)
        else:
            self.state.add_event(event.kind, event.text, **event.data)
        self._changed()

    def _connection_changed(self, connection: ConnectionState) -> None:
        self.state.set_connection(connection)
        self._changed()

    def _changed(self) -> None:
        # Every change is drawn from the state, the bar's latest redraw with it.
        if self.on_change is not None and self._running:
            self.on_change()
