"""The rules: what was observed in, one verdict out. Pure: no I/O, no clock.

`console.evidence.gather` collects an `Evidence` from a target; `diagnose` names what is
wrong, shows the observations that say so, the next step, and the action that takes it (its `step`,
one of console.verdicts.NEXT_STEPS). The prose names no key: `pulse check`, alerts and reports
print it where there are none; the console shows the key of the verdict's `step` beside it.

A verdict is earned. "Healthy" needs evidence of progress: the log writing within its rhythm
(console.stall), or, once the log is quiet past the floor, the run's stacks moving while they were
recorded (py-spy record: two stacks or more that are not waits, or a main thread that sleeps in its
own loop and wakes). Without such evidence the verdict is never healthy: it says what is missing.
A problem line is judged by what followed it: one of kind oom, cuda or nccl after which the run
made progress (a step, rate or loss line; stacks that move; for a family that handles itself,
console.observe.recovered, a log still within its rhythm) is a recovered warning, counted; it is
fatal when the process died, or nothing followed it while it is recent.

Rules, first match wins ("alive" = a matched process not a zombie; "busy" = a process of the run
over `stall.cpu_idle_pct` by the delta of utime+stime over the sampling window (never ps's
lifetime average), or the run's own use of a GPU over `stall.gpu_idle_pct`: its processes' SM %
when read, else the device's use when a process of the run is on it. A process whose dumped
threads all wait (a collective, a rendezvous, a CUDA synchronize, a queue, a lock, I/O), or that
the recording saw waiting or still, is never busy, even at 100 % CPU):

| verdict             | when                                                                             | step           |
| ------------------- | -------------------------------------------------------------------------------- | -------------- |
| unknown             | no process reading and no log reading at all                                     | —              |
| oom                 | an OOM line since the launch the run did not recover from (nothing alive, or recent with no progress after) | warmup/restart |
| diverged            | a NaN/Inf loss line since the launch                                             | log            |
| launch_failed       | nothing alive, and the log missing, empty, or not written since the launch       | restart        |
| stopped             | alive, and a process of the run in state T: "stopped by you at HH:MM:SS" after Pulse's own audited SIGSTOP, else "stopped (state T)" | continue |
| gpu_contexts_unseen | nothing alive in view, but in a PID namespace the GPUs hold memory under PIDs it cannot see (host PIDs): the contexts may live on | —              |
| dead                | nothing alive (NCCL's watchdog and flight recorder, then the last problem lines, are the evidence) | log            |
| hung                | alive, a thread died ("Exception in thread …") with no progress logged after, and the run idle or quiet | restart        |
| healthy             | busy, not yet recorded, and its progress drawn only on a terminal (the framework, the setting that logs it) | —              |
| (no log progress)   | quiet past the floor, or stalled, or no log: judged by the stacks below          |                |
| buffered            | the recorded stacks move (or it is busy), stdout a regular file without -u, the log only whole buffers (or only stderr's warnings since its last progress) | restart        |
| healthy             | the recorded stacks move: "quiet N s, but the run works: X moves in F"           | —              |
| unknown             | recorded busy in one place (a long call): another look tells                      | dump           |
| hung                | recorded, nothing moves: every thread waits (the collective and the ranks not in it, the straggler, a rank alone at init_process_group and who never joined, the DataLoader workers, a kernel that does not end) | dump (restart when a thread died) |
| hung / buffered     | not recorded (py-spy refused), stalled: idle (hung) or busy into a buffered file  | dump/restart   |
| unknown             | not recorded, quiet past the floor but not stalled: what is missing, what would tell | dump      |
| slow                | the last rates < `metrics.slow_fraction` × the run's best (console.slowness)     | dump           |
| unknown             | a thread died under DEATH_IS_NEWS_S ago and the log still progresses: news, not yet a hang | log   |
| healthy             | the log progresses within its rhythm (said "quiet" past a few of its intervals), with the problems it went on past | — |

Each verdict's severity, display level and usual step are in the one table, console.verdicts.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from console.config import Config
from console.diagnose.evidence import DeadThread, Evidence, ProblemLine, StackSummary, Verdict
from console.diagnose.explanation import (
    QUOTE_CHARS,
    QUOTED_LINES,
    clip,
    clock_text,
    exception_type,
    lifetime_cpu_pct,
    record_text,
    short_who,
    thread_who,
    user_frame,
)
from console.diagnose.stacks import StackGroup, call_text, group_stacks, group_sentence, in_collective, stragglers
from console.model import GpuReading, LineKind, ProcessReading, run_pids
from console.observe.nccl import never_joined, nccl_lines
from console.observe.progress import TerminalOnlyProgress
from console.observe.roles import fold_helpers
from console.state import RATE_UNITS
from console.stall import Silence, is_stalled
from console.units import counted, format_duration, format_indices, spread
from console.verdicts import kind

if TYPE_CHECKING:
    from console.slowness import Baseline, Slowdown

#: Problem kinds a run may recover from: judged by what followed them (an OOM the run went on past is a warning).
RECOVERABLE_KINDS = (LineKind.OOM, LineKind.CUDA_ERROR, LineKind.NCCL_TIMEOUT)
#: A thread's death is news this long (a follower's seconds): the header says so while the log still progresses.
DEATH_IS_NEWS_S = 60.0
#: What to do once a thread died and the run waits on it.
THREAD_DIED_STEP = "fix what killed the thread (its traceback is in the log), then restart: what waits on that thread will wait forever"
#: Python's buffer for a file is its block size (st_blksize, 4 KiB or a multiple): a block-buffered
#: stdout writes its log in whole multiples of this.
BUFFER_BYTES = 4096


def diagnose(evidence: Evidence, config: Config) -> Verdict:
    """Name the run's state from `evidence` under `config`'s thresholds (rules in the module docstring)."""
    return _Diagnosis(evidence, config).verdict()


#: The next step for each cause of a slowdown (console.slowness.CAUSES).
SLOW_STEPS = {
    "input-bound": "feed it faster: more DataLoader workers (num_workers), pin_memory and prefetch, or a faster store",
    "slow rank": "look at the straggler's host and the frame it spends its time in; the other ranks wait for it",
    "neighbour on the GPU": "move or stop the other job on the run's GPU",
    "CPU starvation": "free the run's cores (the other work on them) or give it more",
    "GPU held back": "check the GPU's cooling and power (nvidia-smi -q -d PERFORMANCE)",
    "memory pressure": "free host memory (fewer DataLoader workers, a smaller prefetch) or give it more",
    "recompiling": "make the shapes static (pad to buckets) or mark them dynamic (torch._dynamo.mark_dynamic); "
                   "TORCH_LOGS=recompiles says which guard fails",
    "unknown": "look again, or dump the stacks while it is slow",
}


def baseline_of(ev: Evidence) -> Baseline | None:
    """What the run's rate is measured against: the config's baseline, else its journal's best, else its log's."""
    from console.slowness import Baseline, from_log  # here: it loads with the first diagnosis, not for the first frame

    if ev.rate_baseline:
        return Baseline(ev.rate_baseline, "config")
    return ev.rate_history or from_log(ev.rate_values)


def slowdown_of(ev: Evidence, fraction: float) -> Slowdown | None:
    """The run is slow against its baseline (console.slowness.slowdown)."""
    from console.slowness import slowdown

    return slowdown(ev.rate_values, baseline_of(ev), fraction) if ev.rate_values else None


def slow_look_due(evidence: Evidence, verdict: Verdict) -> bool:
    """`verdict` on `evidence` is slow and the cause has not been looked at yet."""
    return (verdict.name == "slow" and evidence.slow_look is None
            and any(p.state not in ("Z", "X") for p in evidence.processes))


def wants_slow_look(evidence: Evidence, config: Config) -> bool:
    """The run is slow and the cause has not been looked at yet."""
    return slow_look_due(evidence, diagnose(evidence, config))


def wants_stacks(evidence: Evidence, config: Config) -> bool:
    """The verdict on `evidence` cannot be earned without the run's stacks (none were taken yet)."""
    if evidence.stacks or evidence.stack_error or not any(p.state not in ("Z", "X") for p in evidence.processes):
        return False
    return evidence.terminal_only_progress is not None or kind(diagnose(evidence, config).name).stacks_decide


def log_proves(verdict: Verdict, evidence: Evidence) -> bool:
    """`verdict` is a problem the log itself proves, whatever the stacks will add: one the stacks never
    decide (a crash, an OOM, a NaN), or a hang on a thread that died with no progress after it. Shown at
    once, while a look at the stacks is still on its way."""
    if verdict.name == "healthy":
        return False
    return not kind(verdict.name).stacks_decide or (
        verdict.name == "hung" and any(not t.progress_after for t in evidence.dead_threads)
    )


class _Diagnosis:
    def __init__(self, ev: Evidence, config: Config) -> None:
        self.ev = ev
        self.stall = config.stall
        self.slow_fraction = config.metrics.slow_fraction
        self.has_warmup = config.warmup.command is not None
        self.alive = tuple(p for p in ev.processes if p.state not in ("Z", "X"))
        self.silence = Silence(ev.progress_silent_s, ev.log_write_interval_s, ev.log_rhythm_estimated, self.stall.log_silent_s,
                               grew=ev.progress_grew)

    # -- observations --------------------------------------------------------

    def _waiting_pids(self) -> set[int]:
        """Processes dumped with every thread waiting (or idle, in a process idle on the CPU): their CPU
        and GPU use is a spinning wait, not work."""
        threads: dict[int, list[StackSummary]] = {}
        for t in self.ev.stacks:
            threads.setdefault(t.pid, []).append(t)
        idle_cpu = {p.pid for p in self.alive if p.cpu_pct is None or p.cpu_pct <= self.stall.cpu_idle_pct}
        return {
            pid
            for pid, found in threads.items()
            if all(t.wait or t.motion in ("waiting", "still") or (t.idle and pid in idle_cpu) for t in found)
        }

    def _working(self) -> list[ProcessReading]:
        """Alive processes busy on the CPU and not just spinning in a wait."""
        waiting = self._waiting_pids()
        return [
            p
            for p in self.alive
            if p.cpu_pct is not None and p.cpu_pct > self.stall.cpu_idle_pct and p.pid not in waiting
        ]

    def _busy_cpu(self) -> bool:
        return bool(self._working())

    def _run_gpu_pids(self, working_only: bool) -> set[int]:
        waiting = self._waiting_pids() if working_only else set()
        return set(run_pids(p for p in self.alive if p.pid not in waiting))

    def _gpu_busy_by_run(self, g: GpuReading) -> bool:
        """The run's own use of GPU `g`: its processes' SM% when read, else the device's use when the run is on it."""
        idle = self.stall.gpu_idle_pct
        working = self._run_gpu_pids(working_only=True)
        if not working:
            return False  # every process of the run waits: none of the GPU's use is its work, host PIDs or not
        if g.process_sm_pct is not None and not self.ev.in_pid_namespace:  # in a container the PIDs are the host's
            return sum(pct for pid, pct in g.process_sm_pct if pid in working) > idle
        if g.utilization_pct is None or g.utilization_pct <= idle:
            return False
        if g.processes and not self.ev.in_pid_namespace:
            on_it = {gp.pid for gp in g.processes}
            if not on_it & self._run_gpu_pids(working_only=False):
                return False  # busy with another job's work
            if self.ev.stacks and not on_it & working:
                return False  # the run's processes on it only spin in a wait
        return True

    def _busy_gpu(self) -> bool:
        return any(self._gpu_busy_by_run(g) for g in self.ev.gpus)

    def _busy(self) -> bool:
        """The run works (CPU or its own GPU use, not a spinning wait), and no rank is stopped on its own."""
        return (self._busy_cpu() or self._busy_gpu()) and not self._blocked_ranks()

    def _cpu_known(self) -> bool:
        return any(p.cpu_pct is not None for p in self.alive)

    def _silent(self) -> bool:
        """No log growth past its stall limit, or no throughput line past the limit for progress (console.stall)."""
        return is_stalled(self.silence, self.ev.rate_silent_s, self.ev.rate_interval_s)

    def _quiet_text(self) -> str:
        return self.silence.quiet_text()

    # -- what the stacks showed --------------------------------------------------

    def _recorded(self) -> bool:
        """The run's threads were recorded: how each moved is known."""
        return any(t.motion is not None for t in self.ev.stacks)

    def _movers(self) -> list[StackSummary]:
        """Threads of the run's programs that moved while recorded (the loop turns), or a main thread
        that sleeps in its own loop and wakes (paced)."""
        return [
            t for t in self.ev.stacks
            if t.role not in ("launcher", "shell") and (t.motion == "moving" or (t.motion == "paced" and t.main))
        ]

    def _busy_in_one_place(self) -> list[StackSummary]:
        return [t for t in self.ev.stacks if t.role not in ("launcher", "shell") and t.motion == "busy"]

    def _motion_lines(self) -> list[str]:
        """'MainThread of main (pid 545) moves: evaluate (quiet_eval.py:23)' for each thread that decided it."""
        out = []
        for t in self._movers()[:4]:
            how = "sleeps in its own loop and wakes" if t.motion == "paced" else "moves"
            out.append(f'thread "{t.name}" of {thread_who(t)} {how} (recorded {record_text()}): {t.where}')
        for t in self._busy_in_one_place()[:2]:
            out.append(f'thread "{t.name}" of {thread_who(t)} is on the CPU in one place the whole recording: {t.where}')
        return out

    def _recent(self, line: ProblemLine) -> bool:
        return line.age_s is None or line.age_s <= self.silence.limit_s

    def _of_kind(self, *kinds: LineKind) -> list[ProblemLine]:
        return [p for p in self.ev.problems if p.kind in kinds]

    # -- evidence lines ------------------------------------------------------

    def _process_lines(self) -> list[str]:
        ev = self.ev
        if not ev.processes:
            return [f"no process of the run found ({ev.process_error})" if ev.process_error else "no process of the run found"]
        lines = []
        for p in fold_helpers(ev.processes, self.stall.cpu_idle_pct):
            if p.cpu_pct is None:
                cpu = "CPU unknown (one sample only)"
            else:
                cpu = f"CPU {p.cpu_pct:.1f}% over {ev.window_s:g} s"
            lifetime = lifetime_cpu_pct(p)
            if lifetime is not None:
                cpu += f" (ps would say {lifetime:.1f}%: lifetime average)"
            state = "zombie" if p.state == "Z" else f"state {p.state}"
            role = f" [{p.label}]" if p.label else ""
            lines.append(f"pid {p.pid}{role} {cpu}, {state}, {counted(p.threads, 'thread')}: {clip(p.cmdline, 80)}")
            busy = [t for t in p.thread_cpu if t.cpu_pct is not None and t.cpu_pct > self.stall.cpu_idle_pct]
            if busy:
                busy.sort(key=lambda t: -(t.cpu_pct or 0.0))
                shown = ", ".join(f"{t.name or t.tid} {t.cpu_pct:.0f}%" for t in busy[:4])
                lines.append(f"pid {p.pid} busy threads: {shown}")
        return lines

    def _gpu_lines(self) -> list[str]:
        ev = self.ev
        if ev.gpu_error and not ev.gpus:
            return [f"GPUs unreadable ({ev.gpu_source}): {ev.gpu_error}"]
        # GPUs that read alike (same utilization, same holders) are one line: eight near-identical
        # lines would push the stacks and the next step out of view.
        groups: dict[tuple, list] = {}
        for g in ev.gpus:
            util = "util ?" if g.utilization_pct is None else f"util {g.utilization_pct:.0f}%"
            holders = tuple(sorted(gp.pid for gp in g.processes))
            groups.setdefault((util, holders, g.memory_used_mib is None), []).append(g)
        lines = []
        for (util, holders, unknown), members in groups.items():
            name = f"GPU {members[0].index}" if len(members) == 1 else f"GPUs {format_indices([g.index for g in members])}"
            used = [g.memory_used_mib for g in members if g.memory_used_mib is not None]
            mem = "mem ?" if unknown else f"{spread([mib / 1024 for mib in used], '{:.1f}')} GiB used"
            held = f" (pid {', '.join(map(str, holders))})" if holders else ""
            lines.append(f"{name} {util}, {mem}{held}")
        for g in ev.gpus:
            lines += self._gpu_share_lines(g)  # whose work each busy GPU does: one line per GPU, it differs
        if ev.gpu_contexts_unseen:
            pids = sorted({gp.pid for g in ev.gpus for gp in g.processes} - run_pids(ev.processes))
            held = f"pid {', '.join(map(str, pids))}" if pids else "PIDs the driver does not list here"
            lines.append(f"GPU memory held by {held}: this PID namespace cannot see them (host PIDs)")
        return lines

    def _gpu_share_lines(self, g: GpuReading) -> list[str]:
        """Whose work a busy GPU does: 'GPU 0 95%, none of it from the run: pid 710 is not the run's'."""
        idle = self.stall.gpu_idle_pct
        if g.utilization_pct is None or g.utilization_pct <= idle or self.ev.in_pid_namespace:
            return []
        run = self._run_gpu_pids(working_only=False)
        if g.process_sm_pct is not None:
            mine = sum(pct for pid, pct in g.process_sm_pct if pid in run)
            others = [f"pid {pid} {pct:.0f}%" for pid, pct in g.process_sm_pct if pid not in run and pct > idle]
            share = "none of it" if mine <= idle else f"{mine:.0f}% SM"
            line = f"GPU {g.index} {g.utilization_pct:.0f}%, {share} from the run"
            if others:
                line += f": {', '.join(others)} {'is' if len(others) == 1 else 'are'} not the run's"
            return [line]
        foreign = [gp.pid for gp in g.processes if gp.pid not in run]
        if g.processes and len(foreign) == len(g.processes):
            names = ", ".join(f"pid {pid}" for pid in foreign)
            return [f"GPU {g.index} {g.utilization_pct:.0f}%, none of it from the run: {names} {'is' if len(foreign) == 1 else 'are'} not the run's"]
        return []

    def _program_threads(self) -> list[StackSummary]:
        """The main thread of each rank (or of the run's main program), by rank."""
        mains = [t for t in self.ev.stacks if t.main and t.role not in ("worker", "child", "launcher", "shell")]
        return sorted(mains, key=lambda t: (t.rank if t.rank is not None else -1, t.pid))

    def _blocked_ranks(self) -> list[StackSummary]:
        """Ranks stopped on something of their own (their data, a queue, a lock, I/O; not a collective),
        every thread and worker of theirs idle, while another rank still runs: a collective cannot
        complete without them, so the running ranks only spin. Empty unless there are two ranks or more."""
        mains = self._program_threads()
        if len(mains) < 2:
            return []
        waiting = self._waiting_pids()
        cpu = {p.pid: p.cpu_pct for p in self.alive}

        def blocked(main: StackSummary) -> bool:
            workers = [t.pid for t in self.ev.stacks if t.role == "worker" and t.parent == main.pid]
            idle = (cpu.get(main.pid) or 0.0) <= self.stall.cpu_idle_pct
            return bool(main.wait) and not in_collective(main) and idle and main.pid in waiting and set(workers) <= waiting

        stuck = [m for m in mains if blocked(m)]
        return stuck if len(stuck) < len(mains) else []

    def _rank_groups(self) -> list[StackGroup]:
        return group_stacks((thread_who(t), t) for t in self._program_threads())

    def _rank_lines(self) -> list[str]:
        """Ranks grouped by stack, the odd one out named: '… rank 1 is the straggler'."""
        groups = self._rank_groups()
        if len(self._program_threads()) < 2:
            return []
        lines = [group_sentence(g) for g in groups]
        names = [short_who(who) for g in stragglers(groups) for who in g.ranks]
        names = names or [short_who(thread_who(t)) for t in self._blocked_ranks()]
        if names:
            lines.append(f"{', '.join(names)} {'is the straggler' if len(names) == 1 else 'are the stragglers'}")
        return lines

    def _worker_lines(self) -> list[str]:
        """The stacks of DataLoader workers whose owner's main thread waits on them."""
        lines = []
        for owner in self._program_threads():
            if not owner.wait:
                continue
            workers = [t for t in self.ev.stacks if t.main and t.role == "worker" and t.parent == owner.pid]
            for g in group_stacks((str(t.pid), t) for t in workers):
                state = "blocked" if g.wait or g.idle else "running"
                on = f" on {g.wait}" if g.wait else ""
                many = "DataLoader workers" if g.count > 1 else "DataLoader worker"
                lines.append(f"{g.count} {many} of {thread_who(owner)} {state}{on} in {g.where} (pids {', '.join(g.ranks)})")
        return lines

    def _hung_summary(self) -> str:
        """What the hang is: the collective and the ranks not in it, or the wait of the main thread."""
        groups = self._rank_groups()
        behind = stragglers(groups)
        waiting = [g for g in groups if in_collective(g)]
        nccl = self._nccl_summary()
        if nccl:
            return nccl
        died = [f'thread "{t.name}" died of {exception_type(t.exception)}' for t in self.ev.dead_threads]
        if died:
            return "; ".join(died) + ", then the run stopped"
        if waiting and behind:
            call = call_text(waiting[0].collective)
            inside = [short_who(w) for g in waiting for w in g.ranks]
            outside = [short_who(w) for g in behind for w in g.ranks]
            return (
                f"{', '.join(inside)} {'waits' if len(inside) == 1 else 'wait'} in {call}; "
                f"{', '.join(outside)} {'is' if len(outside) == 1 else 'are'} not in it, in {user_frame(behind[0].where)}"
            )
        if waiting and len(groups) == 1 and groups[0].count == 1:
            main = waiting[0]
            spinning = f", spinning at {main.cpu_pct:.0f}% CPU," if (main.cpu_pct or 0.0) > 50 else ""
            return f"the main thread waits in {call_text(main.collective)}{spinning} in {user_frame(main.where)}" \
                + self._own_kernel_text()
        if waiting:
            return f"every rank waits in {call_text(waiting[0].collective)}"
        blocked = self._blocked_ranks()
        if blocked:
            first = blocked[0]
            others = [short_who(thread_who(t)) for t in self._program_threads() if t not in blocked]
            return f"{short_who(thread_who(first))} {self._waits_on(first)}; {', '.join(others)} cannot finish its step"
        mains = self._program_threads()
        peers = [t for t in mains if t.wait == "rendezvous"]
        if peers and len(peers) == len(mains):
            world = dict(peers[0].run_env).get("WORLD_SIZE")
            of = f" of {world}" if world else ""
            who = ", ".join(short_who(thread_who(t)) for t in peers)
            return f"{who}{of} {'waits' if len(peers) == 1 else 'wait'} for peers that never joined, in {user_frame(peers[0].where)}"
        if len(mains) == 1 and mains[0].wait:
            return f"the main thread {self._waits_on(mains[0])}"
        if mains and all(t.motion in ("waiting", "still") for t in mains):
            return f"the main thread is stopped in {user_frame(mains[0].where)}"
        return "the run is alive and idle"

    def _own_kernel_text(self) -> str:
        """'; GPU 0 is 100% busy with the run's own work: a kernel that never ends', when it is."""
        busy = [g for g in self.ev.gpus if self._gpu_used_by_run(g)]
        if not busy:
            return ""
        names = ", ".join(f"GPU {g.index}" for g in busy)
        return f"; {names} {'is' if len(busy) == 1 else 'are'} busy with the run's own work: a kernel that does not end"

    def _gpu_used_by_run(self, g: GpuReading) -> bool:
        """The run's processes (waiting or not) use GPU `g` by its per-process samples."""
        run = self._run_gpu_pids(working_only=False)
        if g.process_sm_pct is None or self.ev.in_pid_namespace:
            return False
        return sum(pct for pid, pct in g.process_sm_pct if pid in run) > 50.0

    def _waits_on(self, main: StackSummary) -> str:
        """'waits on its DataLoader workers (hf_trainer.py:75)', 'waits on queue get in pack_hidden (hung.py:9)'."""
        if "_get_data" in main.where and any(t.role == "worker" and t.parent == main.pid for t in self.ev.stacks):
            return f"waits on its DataLoader workers ({user_frame(main.where).rpartition(' (')[2].rstrip(')')})"
        return f"waits on {main.wait} in {user_frame(main.where)}"

    def _log_lines(self) -> list[str]:
        ev = self.ev
        if ev.log_path is None:
            return ["no log configured"]
        if not ev.log_exists:
            return [f"log {ev.log_path} does not exist"]
        if ev.log_kind != "file":
            return [f"log {ev.log_path} is a {ev.log_kind}, not a file: its size and age say nothing of the run"]
        lines = [f"log {ev.log_path}: {ev.log_size} bytes, grew {ev.log_growth} bytes in {ev.window_s:g} s"]
        silence = self.silence
        if ev.log_warnings_only_s is not None:
            lines.append(f"no progress in the log for {format_duration(ev.log_warnings_only_s)}: only warnings since"
                         f" (stderr reaches it; stdout may be block-buffered), {silence.rhythm_text()} ({silence.limit_text()})")
        elif ev.log_silent_s is not None and ev.log_growth == 0:
            lines.append(f"log silent {format_duration(ev.log_silent_s)}, {silence.rhythm_text()} ({silence.limit_text()})")
        elif ev.log_write_interval_s is not None:
            lines.append(f"log {silence.rhythm_text()}")
        if ev.terminal_only_progress is not None:
            lines.append(f"no progress reaches the log: {ev.terminal_only_progress.advice}")
        if ev.rate_silent_s is not None:
            usual = f"usually every {format_duration(ev.rate_interval_s, tenths=True)}" if ev.rate_interval_s else "usual interval not learned yet"
            lines.append(f"last throughput line {format_duration(ev.rate_silent_s)} ago ({usual})")
        return lines

    def _stdout_lines(self) -> list[str]:
        lines = []
        for p in self.alive:
            if p.stdout is None:
                continue
            mode = {True: "unbuffered", False: "not unbuffered", None: "buffering unknown"}[p.unbuffered]
            lines.append(f"pid {p.pid} stdout → {p.stdout}, {mode}")
        return lines

    def _problem_lines(self, lines: list[ProblemLine]) -> list[str]:
        out = []
        for line in lines[-QUOTED_LINES:]:
            age = "" if line.age_s is None else f" ({format_duration(line.age_s)} ago)"
            out.append(f"{line.kind.value}{age}: {clip(line.text, QUOTE_CHARS)}")
        return out

    def _stack_lines(self) -> list[str]:
        ev = self.ev
        if ev.stack_error:
            return [f"stacks not dumped: {ev.stack_error}"]
        out = []
        several = len({t.pid for t in ev.stacks}) > 1
        for t in ev.stacks:
            fold = f" ×{t.count}" if t.count > 1 else ""
            what = f"waiting on {t.wait}" if t.wait else ("idle" if t.idle else "running")
            whose = f"{thread_who(t)} " if several else ""
            out.append(f'{whose}thread "{t.name}"{fold} {what}: {t.where}')
        out += [f"not dumped: {why}" for why in ev.stacks_missing]
        return out

    def _throughput_line(self) -> list[str]:
        ev = self.ev
        if ev.rate_now is None or ev.rate_metric is None:
            return []
        unit = RATE_UNITS.get(ev.rate_metric, ev.rate_metric)
        baseline = baseline_of(ev)
        if baseline is not None:
            ratio = ev.rate_now / baseline.rate
            what = "baseline" if baseline.source == "config" else "its best sustained"
            return [f"throughput {ev.rate_now:,.0f} {unit} = {ratio:.0%} of {what} {baseline.rate:,.0f} "
                    f"({baseline.where(time.time())})"]
        from console.slowness import no_history_text

        return [f"throughput {ev.rate_now:,.0f} {unit} ({no_history_text(len(ev.rate_values))})"]

    # -- the rules -----------------------------------------------------------

    def _slow(self, found: Slowdown) -> Verdict:
        ev = self.ev
        unit = RATE_UNITS.get(ev.rate_metric or "", ev.rate_metric or "")
        text = found.text(unit, time.time())
        if ev.slow_look is None:
            return Verdict("slow", text, self._process_lines() + self._gpu_lines(),
                           "look at the cause: a few seconds of every process's stacks, /proc and NVML", "dump", found)
        from console.slowness import name_cause

        cause = name_cause(ev.slow_look)
        lines = [*cause.evidence, *(f"ruled out: {why}" for why in cause.ruled_out)]
        return Verdict("slow", f"{cause.name}: {cause.summary}; {text}", lines, SLOW_STEPS[cause.name], "dump", found)


    def verdict(self) -> Verdict:
        ev = self.ev
        if not ev.processes and ev.process_error and ev.log_path is None:
            return Verdict(
                "unknown",
                "nothing could be read from the target",
                self._process_lines() + self._gpu_lines(),
                "check the target settings and that the run's processes are readable (/proc)",
                None,
            )

        ooms = [p for p in self._of_kind(LineKind.OOM) if self._fatal(p)]
        if ooms:
            state = "the run is dead" if not self.alive else "a process is still alive"
            if any("OutOfResources" in p.text for p in ooms):
                # Triton: a kernel config asks for more shared memory than the GPU has; the batch is not the cause.
                return Verdict(
                    "oom",
                    f"a Triton kernel asked for more shared memory than the GPU has (OutOfResources); {state}",
                    self._problem_lines(ooms) + self._process_lines() + self._gpu_lines(),
                    "use smaller autotune configs (block sizes, num_stages) for that kernel, then restart",
                    "restart",
                )
            step = "warmup" if self.has_warmup else "restart"
            advice = "warm the GPUs one at a time or lower the batch, then restart"
            return Verdict(
                "oom",
                f"CUDA out of memory; {state}",
                self._problem_lines(ooms) + self._process_lines() + self._gpu_lines(),
                advice if self.has_warmup else "lower the batch or sequence length, then restart",
                step,
            )

        nans = self._of_kind(LineKind.NAN)
        if nans:
            return Verdict(
                "diverged",
                "the loss went NaN/Inf",
                self._problem_lines(nans) + self._process_lines() + self._log_lines(),
                "read the log around the first NaN; lower the learning rate or restore a checkpoint",
                "log",
            )

        if not self.alive:
            return self._not_alive()

        stopped = [p for p in self.alive if p.state == "T"]
        if stopped:
            return self._stopped(stopped)

        dead = [t for t in ev.dead_threads if not t.progress_after]
        if dead and (not self.silence.progressing or not self._busy_cpu()):  # a busy run may still log its next step
            return self._thread_died(dead)

        hidden = ev.terminal_only_progress
        if hidden is not None and self._busy() and not self._recorded():  # its log's silence says nothing: the processes do
            return self._progress_off_log(hidden, "the run is busy")
        if self._silent() or self.silence.needs_stacks or not self._log_tells():
            return self._without_log_progress()

        found = slowdown_of(ev, self.slow_fraction)
        if found is not None:
            return self._slow(found)

        if hidden is not None:
            return self._progress_off_log(hidden, f"the run is alive but not busy; {self._quiet_text()}")
        lately = [t for t in ev.dead_threads if t.age_s is not None and t.age_s < DEATH_IS_NEWS_S]
        if lately:
            return self._thread_died_lately(lately)
        if self.silence.progressing:
            summary = "the run is alive and its log progresses"
        else:
            summary = f"its log is {self._quiet_text()}; the run is alive"
        return self._healthy(summary, self._log_lines())

    def _healthy(self, summary: str, evidence: list[str]) -> Verdict:
        """Healthy, on the evidence of progress given, with the problems the run went on past."""
        return Verdict(
            "healthy",
            summary,
            evidence + self._dead_thread_lines(list(self.ev.dead_threads)) + self._recovered_lines() + self._throughput_line()
            + self._process_lines() + self._gpu_lines(),
            "nothing to do",
            None,
        )

    # -- a problem judged by what followed it -------------------------------------

    def _fatal(self, line: ProblemLine) -> bool:
        """A problem line the run did not recover from: it died, or no progress came after it (while recent).

        A dead thread's problem is the thread's (the process lives on: _thread_died judges it). A
        family that handles itself (the autotuner skipping a config) is recovered while the run makes
        progress by any sign: its log within its rhythm, or its stacks moving.
        """
        if not self.alive:
            return True
        if line.thread is not None or line.progress_after:
            return False
        if line.family is not None and (not self.silence.needs_stacks or self._movers()):
            return False  # it says itself it goes on: while the log is not quiet past the floor, it does
        if self._movers() and not self.silence.stalled:
            return False  # the run works past it: its stacks move
        return self._recent(line)

    def _recovered_lines(self) -> list[str]:
        """The problems the run went on past, each family counted, the rest by their line."""
        ev = self.ev
        lines = [f"{family.text} (the run went on)" for family in ev.families]
        others = [p for p in ev.problems if p.kind in RECOVERABLE_KINDS and p.family is None and not self._fatal(p)]
        for p in others[-QUOTED_LINES:]:
            lines.append(f"{p.kind.value}, recovered (progress followed): {clip(p.text, QUOTE_CHARS)}")
        return lines

    def _progress_off_log(self, hidden: TerminalOnlyProgress, state: str) -> Verdict:
        """Healthy as far as can be told: the framework draws its progress on a terminal the log never sees."""
        return Verdict(
            "healthy",
            f"its progress goes only to a terminal ({hidden.framework}), not to its log; {state}",
            self._log_lines() + self._process_lines() + self._gpu_lines() + self._stack_lines(),
            hidden.advice,
            None,
        )

    def _not_alive(self) -> Verdict:
        ev = self.ev
        zombies = [p for p in ev.processes if p.state == "Z"]
        gone = "only zombie processes remain" if zombies else "no process of the run is alive"
        empty = ev.log_path is not None and (not ev.log_exists or ev.log_size == 0)
        if empty or ev.log_written_since_launch is False:
            what = "missing" if not ev.log_exists else ("empty" if ev.log_size == 0 else "not written since the launch")
            return Verdict(
                "launch_failed",
                f"{gone} and the log is {what}",
                self._process_lines() + self._log_lines() + self._problem_lines(list(ev.problems)),
                "check the launch command, its working directory and the log path, then restart",
                "restart",
            )
        if ev.gpu_contexts_unseen:
            return Verdict(
                "gpu_contexts_unseen",
                f"{gone} here, yet GPU memory is held under PIDs this container cannot see",
                self._gpu_lines() + self._process_lines() + self._problem_lines(list(ev.problems)) + self._log_lines(),
                "an empty or foreign GPU process list in a PID namespace does not mean the contexts are gone; "
                "check from the host (or run Pulse there) before relaunching",
                None,
            )
        nccl = self._nccl_summary()
        return Verdict(
            "dead",
            f"{gone}: {nccl}" if nccl else gone,
            self._nccl_lines()
            + self._process_lines()
            + self._problem_lines(list(ev.problems))
            + self._log_lines()
            + self._gpu_lines(),
            "read the end of the log for the cause, then restart",
            "log",
        )

    def _stopped(self, stopped: list[ProcessReading]) -> Verdict:
        """A process of the run in state T: a stopped process makes no progress, and is not hung. Pulse's own
        SIGSTOP is a fact it audited (who and when); any other stop (a debugger, Ctrl+Z, a scheduler's suspend)
        is someone else's, and only its state is known."""
        sent = {s.pid: s for s in self.ev.signals}
        ours = [(p, sent[p.pid]) for p in stopped if p.pid in sent and sent[p.pid].signal == "STOP"]
        pids = ", ".join(f"pid {p.pid}" for p in stopped)
        evidence = (
            [f"pid {p.pid} ({p.label or p.role or 'process'}) is in state T: stopped, not scheduled" for p in stopped]
            + [f"Pulse sent SIGSTOP to pid {p.pid} at {clock_text(s.at)} (audited)" for p, s in ours]
            + self._log_lines()
            + self._process_lines()
            + self._gpu_lines()
        )
        if ours:
            at = clock_text(max(s.at for _, s in ours))
            others = [p for p in stopped if p.pid not in {q.pid for q, _ in ours}]
            also = f"; {', '.join(f'pid {p.pid}' for p in others)} stopped (state T) by someone else" if others else ""
            return Verdict(
                "stopped",
                f"{'pid ' + str(ours[0][0].pid) if len(ours) == 1 else f'{len(ours)} processes'} stopped by you at {at} (SIGSTOP){also}",
                evidence,
                "send SIGCONT to resume it; stopped, it holds its GPU memory and its peers wait",
                "continue",
            )
        return Verdict(
            "stopped",
            f"{pids} stopped (state T), not by Pulse: a debugger, Ctrl+Z or a scheduler's suspend",
            evidence,
            "find who stopped it; SIGCONT resumes it once they are done",
            "continue",
        )

    def _nccl_lines(self) -> list[str]:
        return nccl_lines(list(self.ev.nccl), list(self.ev.flight))

    def _nccl_summary(self) -> str | None:
        """'the NCCL watchdog timed out in ALLREDUCE #5530; rank 1 never joined it', when NCCL says so."""
        ev = self.ev
        seq, op, missing = never_joined(list(ev.flight))
        timed_out = next((f for f in ev.nccl if f.op), None)
        if timed_out is None and not missing:
            return None
        text = f"the NCCL watchdog timed out in {timed_out.op} #{timed_out.seq}" if timed_out else f"{op} #{seq} stalled"
        if missing:
            text += f"; {', '.join(f'rank {r}' for r in missing)} never joined {op} #{seq}"
        return text

    def _dead_thread_lines(self, dead) -> list[str]:
        return [
            f'thread "{t.name}" died{"" if t.age_s is None else f" {format_duration(t.age_s)} ago"}: {clip(t.exception, QUOTE_CHARS)}'
            + (" (the log went on for a while after)" if t.progress_after else "")
            for t in dead
        ]

    def _thread_died(self, dead: list[DeadThread]) -> Verdict:
        """A thread died and the process lives on without progress: whatever waits on that thread waits forever."""
        first = dead[-1]
        others = f" (and {len(dead) - 1} more thread(s))" if len(dead) > 1 else ""
        mains = self._program_threads()
        waiting = [f"the main thread {self._waits_on(mains[0])}"] if len(mains) == 1 and mains[0].wait else []
        return Verdict(
            "hung",
            f'thread "{first.name}" died of {exception_type(first.exception)}{others}; the process lives on',
            self._dead_thread_lines(dead)
            + ["no progress was logged after it died"]
            + waiting
            + self._rank_lines()
            + self._log_lines()
            + self._process_lines()
            + self._gpu_lines()
            + self._stack_lines(),
            THREAD_DIED_STEP,
            "restart",
        )

    def _thread_died_lately(self, dead: list[DeadThread]) -> Verdict:
        """A thread died moments ago and the log still progresses: news, not yet a hang (nor healthy)."""
        first = dead[-1]
        return Verdict(
            "unknown",
            f'thread "{first.name}" died of {exception_type(first.exception)} {format_duration(first.age_s or 0.0)} ago;'
            " its log still progresses: if the run waits on that thread, it will stop",
            self._dead_thread_lines(dead) + self._log_lines() + self._process_lines() + self._gpu_lines(),
            "read the thread's traceback in the log; the next minute tells whether the run goes on without it",
            "log",
        )

    def _without_log_progress(self) -> Verdict:
        """The log shows no progress (quiet past the floor, stalled, or no log): the run's stacks must."""
        ev = self.ev
        if self._recorded():
            return self._by_motion()
        if self._silent():
            return self._stalled_unseen()
        quiet = self._log_state_text()
        if ev.stack_error:
            missing = f"its stacks could not be taken ({ev.stack_error})"
        else:
            missing = "its stacks have not been taken yet: they tell a loop that waits from one that is frozen"
        return Verdict(
            "unknown",
            f"{quiet}: no evidence of progress; {missing}",
            self._log_lines() + self._stack_lines() + self._process_lines() + self._gpu_lines(),
            f"take its stacks; without them it is hung once {self.silence.limit_text()} if still idle",
            "dump",
        )

    def _quiet_for(self) -> str:
        """'quiet 5m 12s', or what keeps the log from telling."""
        ev = self.ev
        if ev.log_exists and ev.log_silent_s is not None:
            return f"quiet {format_duration(ev.progress_silent_s or 0.0)}"
        return self._log_state_text()

    def _log_tells(self) -> bool:
        """The log can show progress: configured, there, a file whose age was read."""
        ev = self.ev
        return ev.log_path is not None and ev.log_exists and ev.log_kind == "file" and ev.log_silent_s is not None

    def _log_state_text(self) -> str:
        ev = self.ev
        if ev.log_path is None:
            return "no log is configured"
        if not ev.log_exists:
            return f"its log {ev.log_path} does not exist"
        if ev.log_kind != "file":
            return f"its log {ev.log_path} is a {ev.log_kind}, not a file"
        return f"its log is {self._quiet_text()}"

    def _to_file(self, pids: set[int] | None = None) -> list[ProcessReading]:
        """Processes (of `pids`, else the run's) whose stdout is block-buffered into a regular file, while
        the log holds only whole buffers: empty, or a multiple of BUFFER_BYTES, all a buffered stdout
        writes. A log of any other size had writes that were no buffer's (a flush of the run's own,
        stderr): its silence is the run's, not a buffer's; unless all it wrote since its last progress is
        warnings (stderr is unbuffered: its lines reach the log while stdout's wait in the buffer)."""
        if self.ev.log_size % BUFFER_BYTES and self.ev.log_warnings_only_s is None:
            return []
        waiting = self._waiting_pids()
        return [
            p for p in self.alive
            if (p.pid in pids if pids is not None else p.pid not in waiting)
            and p.role != "launcher" and _is_regular_file(p.stdout) and p.unbuffered is False
        ]

    def _buffered(self, why: str, frames: list[str]) -> Verdict:
        return Verdict(
            "buffered",
            f"{why}, but its log is {self._quiet_text()}: stdout is block-buffered into a file",
            frames + self._log_lines() + self._stdout_lines() + self._process_lines() + self._gpu_lines(),
            "restart with `python -u` or PYTHONUNBUFFERED=1 in [run] env; the lines are in the buffer, not lost",
            "restart",
        )

    def _by_motion(self) -> Verdict:
        """Judged by how the run's threads moved while recorded: the loop turns, or it waits."""
        ev = self.ev
        movers = self._movers()
        if movers:
            to_file = self._to_file({t.pid for t in movers})
            if to_file:
                return self._buffered("the run's loop turns", self._motion_lines())
            if ev.terminal_only_progress is not None:
                return self._progress_off_log(ev.terminal_only_progress, "its stacks move")
            first = movers[0]
            how = "sleeps in its own loop and wakes" if first.motion == "paced" else "moves"
            return self._healthy(
                f"{self._log_state_text()}, but the run works: {thread_who(first)} {how} in {user_frame(first.where)}",
                self._motion_lines() + self._log_lines() + self._stack_lines(),
            )
        busy = self._busy_in_one_place()
        if busy and not self._blocked_ranks():
            if self._to_file({t.pid for t in busy}):
                return self._buffered("the run is busy", self._motion_lines())
            first = busy[0]
            return Verdict(
                "unknown",
                f"{self._log_state_text()}; the run is busy in one place: {thread_who(first)} in {user_frame(first.where)}",
                self._motion_lines() + self._log_lines() + self._stack_lines() + self._process_lines() + self._gpu_lines(),
                "look again: a long call (a checkpoint save, a compile) ends and moves; a livelock stays",
                "dump",
            )
        return self._hung()

    def _stalled_unseen(self) -> Verdict:
        """Stalled, and no recording of the stacks: judged by the run's CPU and GPU alone."""
        ev = self.ev
        busy = self._busy()
        if busy and self._to_file():
            return self._buffered("the run is busy", [])
        if not busy and (self._cpu_known() or ev.gpus):
            return self._hung()
        return Verdict(
            "unknown",
            f"the run is busy but its log is {self._quiet_text()}",
            self._nccl_lines()
            + self._log_lines()
            + self._stdout_lines()
            + self._process_lines()
            + self._gpu_lines()
            + self._rank_lines()
            + self._stack_lines(),
            "dump the stacks to see what it is busy with",
            "dump",
        )

    def _hung(self) -> Verdict:
        ev = self.ev
        return Verdict(
            "hung",
            f"{self._hung_summary()}; {self._quiet_for()}",
            self._nccl_lines()
            + self._dead_thread_lines(self.ev.dead_threads)
            + self._startup_lines()
            + self._rank_lines()
            + self._worker_lines()
            + self._log_lines()
            + self._process_lines()
            + self._gpu_lines()
            + self._stack_lines()
            + self._problem_lines(list(ev.problems)),
            *self._hung_step(),
        )

    def _hung_step(self) -> tuple[str, str]:
        """(next step, its action) for a hang: a restart when a thread died (its stacks, shown, say what waits on
        it; a dump would show them again), else the stacks of every rank."""
        if self.ev.dead_threads:
            return THREAD_DIED_STEP, "restart"
        return "dump the stacks: a thread waits on something that will not come (a dead producer, a collective, a peer)", "dump"

    def _startup_lines(self) -> list[str]:
        """Ranks waiting for their peers before any collective: 'rank 0 of 2 waits in init_process_group …;
        ranks in view: 0; never joined: 1'."""
        waiting = [t for t in self._program_threads() if t.wait == "rendezvous"]
        if not waiting:
            return []
        env = dict(waiting[0].run_env)
        world = env.get("WORLD_SIZE", "")
        seen = sorted({t.rank for t in self._program_threads() if t.rank is not None})
        where = f" at {env['MASTER_ADDR']}:{env.get('MASTER_PORT', '?')}" if env.get("MASTER_ADDR") else ""
        ranks = ", ".join(short_who(thread_who(t)) for t in waiting)
        line = f"{ranks} {'waits' if len(waiting) == 1 else 'wait'} for {'its' if len(waiting) == 1 else 'their'} peers" \
            f" in {user_frame(waiting[0].where)}{where}"
        if world.isdigit():
            line += f" (WORLD_SIZE {world}); ranks in view: {', '.join(map(str, seen)) or 'none'}"
            missing = [str(r) for r in range(int(world)) if r not in seen]
            if missing:
                line += f"; never joined here: {', '.join(missing)}"
        return [line]


def _is_regular_file(stdout: str | None) -> bool:
    """readlink of fd 1 names a file path (not a pipe, socket, tty or /dev/null)."""
    return stdout is not None and stdout.startswith("/") and not stdout.startswith("/dev/")
