"""RunWatch: the journal and the alerts of one run, for the console and for `pulse watch` alike
(JournalWatch, its base, is a Slurm job's: `pulse watch --slurm-job`).

Both drive it the same way: `observe()` once a second (the recorder takes the state's news)
and `verdict()` every CHEAP_DIAGNOSIS_S with the verdict of their RunLook (from the state, and
from the run's stacks once per quiet stretch), which journals a changed verdict and lets the
alerter decide whether to speak.
Only the writer holding the journal's lease sends alerts, so two consoles on one run page
once.
"""

from __future__ import annotations

import asyncio

import time
from collections.abc import Callable

from console.alerts import Alerter, sinks_for
from console.config import Config
from console.diagnose import Verdict
from console.diagnose.steady import SteadyVerdict
from console.evidence import RunLook
from console.journal.recorder import JournalRecorder, VerdictRecorder, restore
from console.journal.store import HISTORY_S, Journal, journal_path, rate_histories
from console.state import RATE_METRICS, RunState

#: How often the cheap diagnosis (from the state alone, no command on the target) runs.
CHEAP_DIAGNOSIS_S = 5.0
#: How much history a console reopened on a run gets back (the sparklines hold 240 points: 4 h of minutes).
RESTORE_S = 4 * 3600.0


#: The journal's minutes change slowly: a learned baseline is read again once a minute.
HISTORY_EVERY_S = 60.0


class JournalWatch:
    """A watch's journal and alerts until `close()`: the verdict's changes journaled and alerted on,
    every action taken beside it journaled (`record_action`, its audit log's `on_record`). For one
    run (RunWatch) or for a Slurm job (`pulse watch --slurm-job`: its verdict is its nodes' worst,
    console/commands/fleet_watch.py)."""

    def __init__(self, config: Config, journal: Journal, recorder: VerdictRecorder, sinks: list, *,
                 wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.journal = journal
        self.verdicts = recorder
        self.alerter = Alerter(config, sinks, journal, clock=wall)
        self.wall = wall
        self.steady = SteadyVerdict()
        """What `pulse watch` says and journals: a better verdict once it holds (the console holds its own)."""

    @staticmethod
    def open_journal(config: Config) -> Journal:
        """`config`'s journal file, its writer started and the lease asked for (JournalError when it cannot be opened)."""
        journal = Journal(journal_path(config)).start()
        journal.take_lease()
        return journal

    def verdict(self, verdict: Verdict) -> None:
        """A verdict from any diagnosis (the cheap one, or a full one on a key press)."""
        self.verdicts.verdict(verdict)
        self.alerter.observe(verdict, speak=self.journal.leader)

    def held(self, fresh: Verdict) -> Verdict:
        """`pulse watch`'s verdict from a fresh one: held steady (console.diagnose.steady), journaled and alerted on."""
        shown = self.steady.observe(fresh, self.wall())
        self.verdict(shown)
        return shown

    def record_action(self, entry: dict) -> None:
        """Journal an action from its audit log entry: the `on_record` of the audit log of each action
        taken beside this watch (the console's keys, the restart policy)."""
        record = entry.get("record", "finished")  # "started" is written before the action acts
        self.journal.add(
            "action",
            f"{entry['action']}: {entry['outcome']}" if record == "finished" else f"{entry['action']} {record}",
            {"action": entry["action"], "record": record, "outcome": entry["outcome"], "operator_host": entry["operator_host"],
             "steps": [f"{step['step']}: {step['status']}" for step in entry["steps"]]},
        )  # stamped by the journal's clock: the entry was written just now

    async def close(self, *, drain_s: float = 5.0) -> None:
        """Let running deliveries finish (bounded), then commit and close the journal."""
        await self.alerter.drain(drain_s)
        self.journal.close()


class RunWatch(JournalWatch):
    """Journals `state` and alerts on its verdicts until `close()`."""

    def __init__(self, config: Config, state: RunState, journal: Journal, sinks: list, *, wall: Callable[[], float] = time.time) -> None:
        self.state = state
        self.restored = restore(state, journal, since_s=RESTORE_S, wall=wall)
        """The last verdict journaled before this watch opened, or None."""
        self.recorder = JournalRecorder(journal, state, wall=wall)
        super().__init__(config, journal, self.recorder, sinks, wall=wall)
        self._history_read_at: float | None = None

    @classmethod
    def open(cls, config: Config, state: RunState, *, terminal_write: Callable[[str], None] | None) -> RunWatch:
        """The watch on `config`'s journal file (JournalError when it cannot be opened)."""
        return cls(config, state, cls.open_journal(config), sinks_for(config.alerts, terminal_write))

    def observe(self) -> None:
        self.recorder.observe()

    async def judge(self, look: RunLook) -> Verdict | None:
        """The run's verdict now (looking at its stacks when one is due), held steady (console.diagnose.steady),
        journaled and alerted on; None before two samples."""
        await self._learn_baseline(look)
        verdict, due, _ = look.cheap()
        if due:
            verdict, _ = await look.full()
        return self.held(verdict) if verdict is not None else None

    async def _learn_baseline(self, look: RunLook) -> None:
        """The run's best sustained rates from its journal, read again at most every HISTORY_EVERY_S
        (a week of rate minutes, read off the event loop: the console's frames never wait on the disk)."""
        now = self.wall()
        if self._history_read_at is None or now - self._history_read_at >= HISTORY_EVERY_S:
            self._history_read_at = now
            minutes = await asyncio.to_thread(self.journal.minutes, now - HISTORY_S, RATE_METRICS)
            look.rate_histories = rate_histories(minutes)
