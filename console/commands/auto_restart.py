"""`pulse watch --restart-on`: the restart policy acting on the run (console.journal.policy decides when).

When the policy asks for a restart, in a task of its own (the watch keeps journaling meanwhile):

1. a full look at the run with every rank's and worker's stacks (console.evidence.gather with
   dump_stacks="always"); its verdict must still be one the policy restarts on, else nothing is done;
2. that look is saved in the journal (kind `policy`): the verdict and its evidence, the processes,
   every stack, the log's last lines, the GPUs;
3. the restart is `pulse restart --yes` itself (console.commands.actions.restart_run): the same plan
   guards, the run's restart lock on the target, the audit records and the verify. Only the processes
   the look judged may be stopped: a run another watch restarted meanwhile is left alone;
4. the outcome is journaled and alerted: restarted, failed, refused, or interrupted (the link was cut
   during the launch, so whether it happened is unknown and it is not retried; or the watch stopped).

A Slurm job's watch (`pulse watch --slurm-job ID`, console/commands/fleet_watch.py) acts the same way
on the job (RestartActor is what both share): every node's look with its stacks, every node's
evidence saved, and `pulse restart --slurm-job ID --yes`'s own function (its requeue or resubmit).

Every attempt counts toward `max_restarts`, whatever its outcome. When the limit is reached the policy
says so once per stretch (an alert) and the watch keeps watching.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Coroutine

from console.actions.audit import StepStatus
from console.commands import actions
from console.config import Config
from console.diagnose import Verdict, diagnose
from console.evidence import RunLook, gather
from console.journal.policy import Decision, RestartPolicy, saved_evidence
from console.journal.watch import JournalWatch, RunWatch
from console.remote.target import TargetError

#: The journal entries' kind.
KIND = "policy"
NEXT_STEP = "read the evidence it saved: pulse journal (or pulse report) on this run"


def restart_args() -> argparse.Namespace:
    """`pulse restart --yes` with nothing else given: the plan's own grace, no --force, audited."""
    return argparse.Namespace(yes=True, grace=None, force=False, root=None, all_roots=False, no_audit=False,
                              accept_escaped=None, read_only=False)


def outcome(code: int, report: actions.ActionReport) -> tuple[str, str]:
    """(word, one line) for how a restart ended: restarted, interrupted, refused or failed."""
    steps = report.steps
    # A "check" step follows only a launch whose answer never came (restart._after_unknown_launch).
    unknown = [e for e in steps if e.step == "check"]
    if code == actions.EXIT_OK:
        verify = [e for e in steps if e.step == "verify"]
        return "restarted", verify[-1].detail if verify else "verified"
    if unknown:
        launch = [e for e in steps if e.step == "launch"]
        return "interrupted", f"{launch[-1].detail}; {unknown[-1].detail}"
    if code == actions.EXIT_REFUSED and not steps:
        return "refused", report.said or "refused"
    failed = [e for e in steps if e.status is StepStatus.FAILED]
    return "failed", f"{failed[0].step}: {failed[0].detail}" if failed else (report.said or f"exit {code}")


class RestartActor(ABC):
    """A watch's restart policy and the restarts it makes: of one run (AutoRestart) or of a Slurm job
    (console.commands.fleet_watch.JobRestart). A subclass says how it looks and restarts (`_restart`);
    the policy, the limit's alert, the journal's entries and the alert of each outcome are here."""

    def __init__(self, config: Config, watch: JournalWatch) -> None:
        self.config = config
        self.watch = watch
        window_start = time.time() - config.watch.restart_window_s
        earlier = [e.time for e in watch.journal.entries(since=window_start, kinds=[KIND]) if e.data.get("event") == "restart"]
        self.policy = RestartPolicy(config.watch, earlier=earlier)
        self.task: asyncio.Task | None = None
        self.restarts = 0
        """Automatic restarts this watch tried (its metrics' counter; the policy counts earlier ones too)."""

    def consider(self, verdict: Verdict) -> None:
        """Feed the verdict just earned; start the restart, or say the limit is reached, when the policy asks."""
        task = self.task
        if task is not None and task.done() and not task.cancelled() and (failed := task.exception()) is not None:
            raise failed  # a bug: the CLI's crash report, not a task that dies unseen
        if not self.policy.active or (self.task is not None and not self.task.done()):
            return
        decision = self.policy.observe(verdict.name)
        if decision is None:
            return
        if decision.action == "limit":
            self._say(decision.text)
            self.watch.journal.add(KIND, decision.text, {"event": "limit", "verdict": decision.verdict, "count": decision.count})
            self.watch.alerter.announce("restart_limit", verdict, decision.text, "look at the run: pulse journal shows"
                                        " the automatic restarts so far")
            return
        self.task = asyncio.create_task(self._restart(decision, verdict), name="pulse watch automatic restart")

    @property
    def due(self) -> bool:
        """The policy will answer the next verdict: judge now (see RestartPolicy.due)."""
        return self.policy.due() and (self.task is None or self.task.done())

    @abstractmethod
    async def _restart(self, decision: Decision, verdict: Verdict) -> None:
        """Look (its verdict must still be one the policy restarts on), save the look, restart, say the outcome."""

    def _look_failed(self, decision: Decision, verdict: Verdict, exc: TargetError) -> None:
        """The full look could not be taken: an attempt all the same (a watch that cannot see what it
        watches does not retry at once), failed, nothing done."""
        self.policy.restarted()
        self.restarts += 1
        self.watch.journal.add(KIND, f"{decision.text}: no evidence could be taken", {"event": "restart", "verdict": decision.verdict})
        self._ended(verdict, "failed", f"the look at the run failed ({exc}); nothing done", actions.ActionReport())

    def _declined(self, decision: Decision, fresh: Verdict) -> bool:
        """True (said and journaled) when the full look's verdict `fresh` is not one the policy restarts on."""
        if fresh.name in self.config.watch.restart_on:
            return False
        text = f"{decision.text}: not restarted: a full look says {fresh.name}: {fresh.summary}"
        self._say(text)
        self.watch.journal.add(KIND, text, {"event": "declined", "verdict": fresh.name})
        return True

    def _saved(self, decision: Decision, saved: dict, what: str) -> None:
        """An attempt is made: it counts, and the look it was decided on (`saved`) is on disk before anything acts."""
        self.policy.restarted()
        self.restarts += 1
        self.watch.journal.add(KIND, f"{decision.text}: evidence saved ({what}); restarting as {self.restart_command()}",
                               {"event": "restart", "count": decision.count, "lasted_s": round(decision.lasted_s, 1), **saved})
        self.watch.journal.flush()

    def restart_command(self) -> str:
        """The command whose path the restart takes, as the journal names it."""
        return "pulse restart --yes"

    async def _restarted(self, verdict: Verdict, restart: Coroutine[None, None, int], report: actions.ActionReport) -> None:
        """Run `restart` (the command's own function, filling `report`), then journal and alert its outcome."""
        try:
            code = await restart
        except asyncio.CancelledError:
            self._ended(verdict, "interrupted", "pulse watch stopped during the restart; the audit log says where", report)
            raise
        word, detail = outcome(code, report)
        self._ended(verdict, word, detail, report)

    def _ended(self, verdict: Verdict, word: str, detail: str, report: actions.ActionReport) -> None:
        text = f"automatic restart: {word}: {detail}"
        self._say(text)
        self.watch.journal.add(KIND, text, {"event": "outcome", "outcome": word, "detail": detail,
                                            "steps": [f"{e.step}: {e.status.value}: {e.detail}" for e in report.steps]})
        self.watch.alerter.announce("restart", verdict, text, NEXT_STEP)

    @staticmethod
    def _say(text: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} policy: {text}", flush=True)

    async def stop(self) -> None:
        """Stop a restart in progress where it is (the audit log records it as interrupted)."""
        if self.task is not None and not self.task.done():
            self.task.cancel("pulse watch stopped")
            await asyncio.gather(self.task, return_exceptions=True)


class AutoRestart(RestartActor):
    """The policy of one run's `pulse watch` and the restart it makes (see the module docstring)."""

    def __init__(self, config: Config, watch: RunWatch, look: RunLook) -> None:
        super().__init__(config, watch)
        self.run_watch = watch
        self.look = look

    async def _restart(self, decision: Decision, verdict: Verdict) -> None:
        self._say(f"{decision.text}: looking at the run first")
        try:
            if self.look.target is None:
                raise TargetError("no target to look at")
            evidence = await gather(self.look.target, self.config, follower_state=self.run_watch.state, dump_stacks="always")
        except TargetError as exc:
            self._look_failed(decision, verdict, exc)
            return
        self.look.looks.remember(evidence, self.config)  # the cheap verdicts that follow see these stacks too
        fresh = diagnose(evidence, self.config)
        self.watch.verdict(fresh)
        if self._declined(decision, fresh):
            return
        saved = saved_evidence(fresh, evidence, [line.text for line in self.run_watch.state.current_lines()])
        self._saved(decision, saved, f"{len(saved['stacks'])} stack lines, {len(saved['log_tail'])} log lines,"
                    f" {len(evidence.gpus)} GPUs")
        report = actions.ActionReport()
        await self._restarted(fresh, actions.restart_run(self.config, restart_args(), report=report,
                                                         judged_pids={p.pid for p in evidence.processes},
                                                         on_record=self.watch.record_action), report)
