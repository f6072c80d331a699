"""A running action: its steps as they start and end, step i/N with an ETA, and its live output.

The action is an async iterator of StepEvent / OutputLine (restart, warmup, custom). A
worker iterates it and posts one message per event, shown as `visible` writes it (a step's
command with its control characters escaped). `c` asks to cancel: iteration stops when the
running step has ended, so the action is never cut between a stop and a launch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Log, Static

from console.actions.audit import FINAL_STATUSES, OutputLine, StepEvent, StepStatus, outcome_of
from console.observe.textsafe import visible
from console.ui.dialogs.modal import FramedModal
from console.ui.keymap import STEP_KEYS
from console.units import format_duration

STATUS_MARKS = {
    StepStatus.RUNNING: ("▶", "bold"),
    StepStatus.OK: ("✓", "green"),
    StepStatus.FAILED: ("✕", "bold red"),
    StepStatus.WARNING: ("!", "yellow"),
    StepStatus.SKIPPED: ("–", "dim"),
}
#: Output lines kept on screen (the audit log keeps the results, not the output).
MAX_OUTPUT_LINES = 5000


class ActionScreen(FramedModal[bool]):
    """Runs `events()` and shows it live; dismisses with True when every step ended OK."""

    BINDINGS = [
        Binding("c", "cancel", "Cancel after this step"),
        Binding("escape,q", "close", "Close"),
    ]

    DEFAULT_CSS = """
    ActionScreen {
        & > .frame { width: 94%; height: 90%; }
        & #steps { height: auto; max-height: 50%; }
        & #progress { height: 1; margin: 1 0 0 0; text-style: bold; }
        & Log { height: 1fr; border-top: solid $panel-lighten-2; background: $surface; }
    }
    """

    class Event(Message):
        """One event of the running action."""

        def __init__(self, event: StepEvent | OutputLine) -> None:
            super().__init__()
            self.event = event

    class Ended(Message):
        """The action finished, was cancelled, or raised (`error`)."""

        def __init__(self, cancelled: bool, error: str | None = None) -> None:
            super().__init__()
            self.cancelled = cancelled
            self.error = error

    def __init__(self, title: str, events: Callable[[], AsyncIterator[StepEvent | OutputLine]]) -> None:
        super().__init__()
        self.action_title = title
        self.events = events
        self.steps: dict[str, StepEvent] = {}
        self.events_seen: list[StepEvent] = []
        self.cancel_requested = False
        self.done = False
        self.ok = False
        self._output: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="frame") as box:
            box.border_title = self.action_title
            box.border_subtitle = "c cancels after the running step · Esc closes when done"
            yield Static(id="steps")
            yield Static(id="progress")
            yield Log(max_lines=MAX_OUTPUT_LINES, id="output")

    def on_mount(self) -> None:
        self.set_interval(0.1, self._flush_output)
        self.run_steps()

    def _flush_output(self) -> None:
        if self._output:
            self.query_one(Log).write_lines(self._output)
            self._output = []

    @work(exclusive=True, exit_on_error=False, group="action")
    async def run_steps(self) -> None:
        """The action's steps, in a worker: each event posted to the screen, until done or cancelled."""
        iterator = self.events()
        try:
            async for event in iterator:
                self.post_message(self.Event(event))
                if self.cancel_requested and isinstance(event, StepEvent) and event.status in FINAL_STATUSES:
                    break
        except Exception as exc:  # the action's own errors are one line for the operator
            self.post_message(self.Ended(self.cancel_requested, f"{type(exc).__name__}: {exc}"))
            return
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        self.post_message(self.Ended(self.cancel_requested))

    @on(Event)
    def _event(self, message: Event) -> None:
        event = message.event
        if isinstance(event, OutputLine):
            self._output.append(visible(f"{event.step}: {event.text}"))
            return
        self.steps[event.step] = event
        self.events_seen.append(event)
        self._render_steps()
        total, index, eta = event.data.get("total"), event.data.get("index"), event.data.get("eta_s")
        if event.status is StepStatus.RUNNING:
            progress = f"step {index}/{total}" if index and total else event.step
            if eta is not None:
                progress += f" · ETA {format_duration(eta)}"
            self.query_one("#progress", Static).update(Text(progress))

    def _render_steps(self) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        for n, event in enumerate(self.steps.values()):
            mark, style = STATUS_MARKS[event.status]
            if n:
                text.append("\n")
            text.append(f"{mark} ", style)
            text.append(visible(event.step), "bold")
            if event.detail:
                text.append(f"  {visible(event.detail)}")  # the launch step's detail is the command it runs
        self.query_one("#steps", Static).update(text)

    @on(Ended)
    def _ended(self, message: Ended) -> None:
        self._flush_output()
        self.done = True
        failed = any(event.status is StepStatus.FAILED for event in self.events_seen)
        self.ok = not message.cancelled and message.error is None and not failed
        if message.error:
            outcome = f"stopped: {message.error}"
        elif message.cancelled and not failed:
            outcome = self._left_by_cancel()
        else:
            # The audit log's own judgement of the steps, so the screen and the record agree.
            outcome = outcome_of(self.events_seen, finished=True)
        self.query_one("#progress", Static).update(Text(visible(outcome)))
        self.query_one(Vertical).border_subtitle = "Esc closes"

    def _left_by_cancel(self) -> str:
        """What the cancel left, as the last ended step says (StepEvent.data "left"), and the key that continues."""
        ended = [event for event in self.events_seen if event.status in FINAL_STATUSES]
        left = next((event.data for event in reversed(ended) if "left" in event.data), None)
        if left is None:
            return f"cancelled after {ended[-1].step}" if ended else "cancelled before the first step"
        key = STEP_KEYS.get(left.get("resume", ""))
        return f"{left['left']}: {key} to {left['resume_does']}" if key else str(left["left"])

    def action_cancel(self) -> None:
        if self.done:
            return
        self.cancel_requested = True
        self.notify("cancelling after the running step", timeout=3)

    def action_close(self) -> None:
        if not self.done:
            self.notify("still running: c cancels after the running step", severity="warning", timeout=3)
            return
        self.dismiss(self.ok)
