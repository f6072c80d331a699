"""The timeline screen (`h`) over a short history, journaled as a console would have journaled it.

Two minutes of the slow scenario's shape: a rate line every 2 s (60 values), healthy, then a third
slower; a slow verdict 50 s before the end; the eight H200s' memory high-water from one sample.
The clocks are fixed, so the same history always renders the same screen.
"""

from __future__ import annotations

from pathlib import Path

from textual.app import App

from console.diagnose import Verdict
from console.journal.recorder import JournalRecorder
from console.journal.report import Points, Window
from console.journal.store import Journal
from console.model import LogStatus, Sample
from console.state import RunState
from console.ui.dialogs.timeline_screen import TimelineScreen
from tests.snapshot_apps.scenarios import LOG_PATH, TARGET_NOW, FakeClock, healthy_rate, step_lines, to_log_lines, training_gpus

#: The wall clock (Unix seconds) at the end of the history: 2025-12-02 05:30:00 UTC.
WALL_END = 1_764_653_400.0
#: Rate values in the history, one every RATE_EVERY_S.
RATE_VALUES = 60
RATE_EVERY_S = 2.0
HEALTHY = Verdict("healthy", "the run is alive and its log progresses", ["14.1K tok/s"], "nothing to do")
SLOW = Verdict("slow", "9.3K tok/s, 34 % below the baseline 14.2K (set in the config), for its last 7 rate values",
               ["9.3K tok/s against 14.2K"], "look at what the run waits on", "dump")


def short_history(path: Path) -> tuple[Window, dict[str, Points]]:
    """The journal's window of a two-minute slow run, and the points the console holds of it."""
    clock, wall = FakeClock(), FakeClock(WALL_END)
    state = RunState(clock=clock)
    journal = Journal(path, clock=wall)
    journal.take_lease()
    recorder = JournalRecorder(journal, state, wall=wall)
    state.add_lines(to_log_lines(step_lines(RATE_VALUES, every_s=RATE_EVERY_S,
                                            rate_of=lambda n: healthy_rate(n) * (1.0 if n < 35 else 0.66))))
    state.add_sample(Sample(time=TARGET_NOW, gpus=training_gpus(), gpu_source="nvml", processes=(),
                            log=LogStatus(LOG_PATH, True, size=1_000_000, mtime=TARGET_NOW - 1, inode=1)))
    for verdict, before_end in ((HEALTHY, RATE_VALUES * RATE_EVERY_S), (SLOW, 50.0)):
        wall.now = WALL_END - before_end
        recorder.verdict(verdict)
    wall.now = WALL_END
    recorder.observe()
    journal.flush()
    start = WALL_END - RATE_VALUES * RATE_EVERY_S
    window = Window(start, WALL_END, *journal.window(start))
    held = recorder.held_points()
    journal.close()
    return window, held


class TimelineApp(App[None]):
    """Only the timeline screen, over `short_history`."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.window, self.held = short_history(path)

    def on_mount(self) -> None:
        self.push_screen(TimelineScreen(self.window, held_points=self.held, held_lines=frozenset(), console_id=""))
