"""The restart plan's guards: what on the target must never be signalled, and how the run is told apart.

The plan asks the target itself (the process agent's `probe`, through `probe_target`) for the facts
the guards need: the probing agent's ancestry (locally Pulse and its ancestors; over SSH the session's shell
chain and sshd), each candidate process's group, session, start time and command line, the
members of the candidates' process groups, the pidfile, read bounded and never through a link,
and the restart lock's state. Everything here but `probe_target` is pure.

A pidfile's PID is the run's only if it looks like the run: it is among the processes `match`
finds (when a match is given), and it started before the pidfile was last written (a PID
handed to another process after the run ended started later). Otherwise the pidfile is stale.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from console.model import GpuReading, ProcessReading
from console.observe.agent import PULSE_PROGRAM_MARK, SHELLS
from console.observe.procfs import pidfile_pid
from console.observe.textsafe import sanitize
from console.observe.remote_process import probe as probe_processes
from console.remote.target import Target, TargetError
from console.units import format_duration, format_indices, spread

#: Names sshd goes by: the listener, and the per-session processes of newer OpenSSH.
_SSHD_NAMES = frozenset({"sshd", "sshd-session", "sshd-auth"})

PROBE_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class ProcFacts:
    """One process on the target as the plan's probe read it from /proc."""

    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    start_ticks: int
    pulse: bool
    """Its command line carries the mark of a program Pulse runs (its sampling agent)."""
    comm: str
    argv: tuple[str, ...]
    started: float = 0.0
    """When it started, as wall-clock time on the target."""

    def command(self) -> str:
        """Its command line (its name when it has none), made safe for a terminal."""
        return sanitize(" ".join(self.argv) or self.comm, 80)[0]

    def label(self) -> str:
        return f"PID {self.pid} ({self.command()})"


@dataclass(frozen=True, slots=True)
class Probe:
    """What the plan learned on the target besides the sample."""

    own: tuple[ProcFacts, ...]
    """The shell that ran the probe and its ancestors: locally Pulse and its own ancestors,
    remotely the SSH session's chain (sshd, the session shell)."""
    procs: dict[int, ProcFacts]
    group_members: dict[int, tuple[int, ...]]
    pidfile: str | None
    """'missing', 'symlink' (then pidfile_text is where it points), 'notregular', 'toolarge' (then
    pidfile_text is its size), 'unreadable' (then why), 'text' or None (no pidfile configured)."""
    pidfile_text: str = ""
    named: ProcFacts | None = None
    """The running process the pidfile names."""
    pidfile_mtime: float | None = None
    """When the pidfile was last written (wall-clock time on the target), for 'text'."""
    lock: str | None = None
    """The restart lock: 'free', 'held' (its holder runs), 'stale' (its holder is gone), 'error', or None (not asked)."""
    lock_owner: dict | None = None
    """What the lock file says of its owner (see console.actions.restart: lock_owner)."""


def parse_probe(records: list[dict]) -> Probe:
    """A Probe from the process agent's `probe` records; a record of another shape is a TargetError."""
    own: list[ProcFacts] = []
    procs: dict[int, ProcFacts] = {}
    members: dict[int, list[int]] = {}
    named: ProcFacts | None = None
    pidfile, pidfile_text, pidfile_mtime, lock, lock_owner = None, "", None, None, None
    try:
        for record in records:
            if record["ev"] == "pidfile":
                pidfile, pidfile_text = str(record["status"]), str(record["text"])
                pidfile_mtime = None if record["mtime"] is None else float(record["mtime"])
            elif record["ev"] == "lock":
                lock, lock_owner = str(record["status"]), record["owner"]
                lock_owner = lock_owner if isinstance(lock_owner, dict) else None
            elif record["ev"] == "member":
                members.setdefault(int(record["pgid"]), []).append(int(record["pid"]))
            else:
                facts = ProcFacts(int(record["pid"]), str(record["state"]), int(record["ppid"]), int(record["pgid"]),
                                  int(record["sid"]), int(record["start_ticks"]), record["pulse"] is True,
                                  str(record["comm"]), tuple(map(str, record["argv"])), float(record["started"]))
                kind = record["kind"]
                if kind == "self":
                    own.append(facts)
                elif kind == "proc":
                    procs[facts.pid] = facts
                elif kind == "named":
                    named = facts
    except (KeyError, TypeError, ValueError) as exc:
        raise TargetError(f"the plan's probe answered a record it cannot read ({exc!r}): {sanitize(str(record), 120)[0]}") from None
    return Probe(tuple(own), procs, {g: tuple(m) for g, m in members.items()}, pidfile, pidfile_text, named,
                 pidfile_mtime, lock, lock_owner)


def is_login_shell(facts: ProcFacts) -> bool:
    """A shell started as a login shell: argv[0] begins with '-', or -l / --login among its options."""
    if facts.argv and facts.argv[0].startswith("-"):
        return True
    names = {facts.comm, os.path.basename(facts.argv[0]) if facts.argv else ""}
    if not names & SHELLS:
        return False
    for word in facts.argv[1:]:
        if word == "--login" or (word.startswith("-") and not word.startswith("--") and "l" in word[1:]):
            return True
        if not word.startswith("-"):
            break
    return False


def protected_reason(facts: ProcFacts, pulse_pids: set[int]) -> str | None:
    """Why `facts` must never be signalled by a restart (`pulse_pids`: Pulse itself and its ancestors); None when nothing forbids it."""
    if facts.pid == 1:
        return "PID 1 (the init of the machine or container)"
    if facts.pid in pulse_pids:
        return "Pulse itself or one of its ancestors (the session Pulse acts through)"
    if facts.pulse:
        return "a program Pulse runs (its sampling agent)"
    first = facts.argv[0].split()[0] if facts.argv and facts.argv[0].split() else ""
    if facts.comm in _SSHD_NAMES or os.path.basename(first).rstrip(":") in _SSHD_NAMES:
        return "sshd (the operator's way in)"
    if is_login_shell(facts):
        return "a login shell (an operator's session)"
    return None


def matches_empty(pattern: str) -> bool:
    """True when `pattern` matches the empty string, so it would select every process."""
    try:
        return re.search(pattern, "") is not None
    except re.error:
        return False  # the agent reports the invalid pattern itself


async def probe_target(target: Target, pids: list[int], pidfile: str | None, lock: str | None = None) -> Probe:
    """The probing agent's ancestry, the facts of `pids`, their groups' members, the pidfile and the lock."""
    probe = parse_probe(await probe_processes(target, pids, pidfile, PULSE_PROGRAM_MARK, PROBE_TIMEOUT_S, lock=lock))
    if not probe.own or (pidfile and probe.pidfile is None) or (lock and probe.lock is None):
        raise TargetError("the plan's probe gave no answer about itself, the pidfile or the lock")
    return probe


def log_glob(log: str) -> str:
    """The glob a process's stdout (an absolute path) is matched against: `~/` matches any home."""
    pattern = log.replace("{started}", "*")
    return "*/" + pattern[2:] if pattern.startswith("~/") else pattern


def process_trees(processes: Iterable[ProcessReading]) -> dict[int, list[ProcessReading]]:
    """Root PID → the processes of its tree, for the selected processes whose parent is not selected."""
    by_pid = {p.pid: p for p in processes}
    trees: dict[int, list[ProcessReading]] = {}
    for p in by_pid.values():
        root = p
        seen = {p.pid}
        while root.ppid in by_pid and root.ppid not in seen:
            seen.add(root.ppid)
            root = by_pid[root.ppid]
        trees.setdefault(root.pid, []).append(p)
    return {r: [by_pid[r]] + [p for p in tree if p.pid != r] for r, tree in trees.items()}


def describe_gpu_use(use: Iterable[tuple[int, int | None]]) -> str:
    """(GPU index, MiB or None) as a person reads it: `GPU 0–7: 79.6 GiB each`, `GPU 2: 12.0 GiB`."""
    use = list(use)
    known = [mib / 1024 for _, mib in use if mib is not None]
    gib = f"{spread(known, '{:.1f}')} GiB" if known else "? GiB"
    each = " each" if len(use) > 1 else ""
    return f"GPU {format_indices([index for index, _ in use])}: {gib}{each}"


@dataclass(frozen=True, slots=True)
class ProcessTree:
    """One unrelated process tree the match found, as the plan shows it and the console's picker lists it."""

    root: int
    command: str
    """The root's command line, made safe for a terminal (cut at TREE_COMMAND_CHARS, then `…`)."""
    pids: tuple[int, ...]
    """Every process of the tree, the root first."""
    elapsed_s: float
    """How long the root has run."""
    gpu_use: tuple[tuple[int, int | None], ...]
    """(GPU index, MiB of the tree's processes there, None when unknown) for each GPU the driver lists them on."""
    writes_log: bool
    """A process of it writes its stdout into the run's log."""
    named_by_pidfile: bool
    the_run: bool = False
    """The tree the plan takes for the run: the one --root names, else the only one that looks like it."""

    @property
    def marks(self) -> tuple[str, ...]:
        """What marks it as the run besides GPU memory: stdout into the run's log, the pidfile's PID."""
        return (("writes the run's log",) if self.writes_log else ()) + (
            ("named by the pidfile",) if self.named_by_pidfile else ())

    @property
    def evidence(self) -> tuple[str, ...]:
        """Everything that marks it as the run (none: it does not look like the run)."""
        return (("holds GPU memory",) if self.gpu_use else ()) + self.marks

    def describe(self) -> str:
        """One line for the plan: `root PID 41 (python3 train.py): 3 process(es), up 5m 02s; GPU 0: 12.0 GiB; …`."""
        gpu = f"; {describe_gpu_use(self.gpu_use)}" if self.gpu_use else ""
        marks = "".join(f"; {mark}" for mark in self.marks)
        the_run = "  <- the run" if self.the_run else ""
        return (f"root PID {self.root} ({self.command}): {len(self.pids)} process(es),"
                f" up {format_duration(self.elapsed_s)}{gpu}{marks}{the_run}")

    def as_json(self) -> dict:
        return {"root": self.root, "command": self.command, "pids": list(self.pids), "elapsed_s": self.elapsed_s,
                "gpu_use": [list(pair) for pair in self.gpu_use], "evidence": list(self.evidence),
                "the_run": self.the_run}


#: How much of a tree's command line the plan and the picker show (a longer one ends in `…`).
TREE_COMMAND_CHARS = 160


def tree_facts(tree: list[ProcessReading], gpus: Iterable[GpuReading], stdout_glob: str,
               pidfile_pid: int | None) -> ProcessTree:
    """A ProcessTree from its processes (the root first, as process_trees gives them) and the GPUs read with them."""
    pids = {p.pid for p in tree}
    use: dict[int, int | None] = {}
    for gpu in gpus:
        for held in gpu.processes:
            if held.pid in pids:
                before = use.get(gpu.index, 0)
                use[gpu.index] = None if before is None or held.used_mib is None else before + held.used_mib
    root = tree[0]
    command, cut = sanitize(root.cmdline, TREE_COMMAND_CHARS)
    return ProcessTree(
        root=root.pid,
        command=command + "…" if cut else command,
        pids=tuple(p.pid for p in tree),
        elapsed_s=root.elapsed_s,
        gpu_use=tuple(sorted(use.items())),
        writes_log=bool(stdout_glob) and any(p.stdout and fnmatchcase(p.stdout, stdout_glob) for p in tree),
        named_by_pidfile=pidfile_pid is not None and pidfile_pid in pids,
    )


@dataclass(frozen=True, slots=True)
class TreeChoice:
    """What the operator's choice among several process trees makes of them."""

    trees: tuple[ProcessTree, ...]
    """Every tree, the one taken for the run marked."""
    stop: frozenset[int]
    """The roots of the trees to stop."""
    refusal: str | None
    """Why no tree can be stopped until the operator chooses (with --root, --all-roots or the console's picker)."""


def choose_tree(trees: Iterable[ProcessTree], root: int | None, all_roots: bool) -> TreeChoice:
    """Among several process trees: the operator names the run with `root` or says to stop every
    tree with `all_roots`; otherwise the choice is refused, saying which tree looks like the run
    when one alone does."""
    trees = tuple(trees)
    likely = [t.root for t in trees if t.evidence]
    run_root = root if root is not None else (likely[0] if len(likely) == 1 else None)
    marked = tuple(dataclasses.replace(t, the_run=t.root == run_root) for t in trees)
    roots = " ".join(str(t.root) for t in trees)
    every = frozenset(t.root for t in trees)
    if root is not None and root not in every:
        return TreeChoice(marked, every, f"--root {root} is not the root of a tree the match found (roots: {roots})")
    if root is not None:
        return TreeChoice(marked, frozenset({root}), None)
    if all_roots:
        return TreeChoice(marked, every, None)
    which = f"PID {run_root} looks like the run" if run_root else "which one is the run cannot be told"
    return TreeChoice(marked, every, f"the match found {len(trees)} unrelated process trees (roots {roots}); {which}:"
                                     " name it with --root PID, or pass --all-roots to stop every tree")


def pidfile_refusals(pidfile: str | None, found: Probe, pulse_pids: set[int], notes: list[str]) -> list[str]:
    """Why the pidfile makes the plan unsafe (a note when it is merely absent or stale)."""
    if not pidfile:
        return []
    if found.pidfile == "missing":
        return []  # the agent's own note says so
    if found.pidfile == "symlink":
        return [f"pidfile {pidfile} is a symbolic link (to {sanitize(found.pidfile_text, 120)[0]}): the launch would"
                " replace the link, and the file it points at would keep the old PID; point [run] pidfile at that file"]
    if found.pidfile == "notregular":
        return [f"pidfile {pidfile} is not a regular file (a FIFO, device, directory or a link to one):"
                " reading or writing it could block; point [run] pidfile at a plain file"]
    if found.pidfile == "unreadable":
        return [f"pidfile {pidfile} cannot be read ({found.pidfile_text}): whether the run is alive cannot be told;"
                " make it readable or point [run] pidfile elsewhere"]
    if found.pidfile == "toolarge":
        return [f"pidfile {pidfile} is {found.pidfile_text} bytes, not a pidfile (one PID is a few bytes);"
                " point [run] pidfile at the file the launch writes"]
    named_pid = pidfile_pid(found.pidfile_text)
    if named_pid is None:
        text = found.pidfile_text.strip()
        held = f"holds {text[:40]!r}" if text else "is empty"
        return [f"pidfile {pidfile} {held}, not a PID: whether the run is alive cannot be told;"
                " remove it once no run is alive"]
    if found.named is None:
        notes.append(f"pidfile {pidfile} names PID {named_pid}, which is not running (stale)")
        return []
    why = protected_reason(found.named, pulse_pids)
    return [f"pidfile {pidfile} names {found.named.label()}, which is {why}"] if why else []


#: How much later than its pidfile's last write a process may seem to start and still be the one
#: it names: the two clocks read are the same, but a pidfile's mtime may be coarse (whole seconds).
PIDFILE_CLOCK_SLACK_S = 2.0


def pidfile_stale_reason(found: Probe, matched: set[int] | None) -> str | None:
    """Why the running process the pidfile names is not the run; None when it may be.

    `matched` holds the PIDs that [run] match finds (None when no match is given).
    """
    named = found.named
    if named is None:
        return None
    if matched is not None and named.pid not in matched:
        return "it is not among the processes [run] match finds"
    if found.pidfile_mtime is not None and named.started > found.pidfile_mtime + PIDFILE_CLOCK_SLACK_S:
        after = named.started - found.pidfile_mtime
        return f"it started {after:.0f} s after the pidfile was written (the PID was handed to another process)"
    return None


def _owner_text(value: object, limit: int = 60) -> str:
    return sanitize(str(value), limit)[0]


def describe_lock_owner(owner: dict | None) -> str:
    """Who an owner record of the restart lock names, and since when, by the target's clock (its
    `now`, added by the agent that read it); what the file says is untrusted."""
    if not owner:
        return "an owner that left no record"
    if "unreadable" in owner:
        return f"an owner whose record cannot be read ({_owner_text(owner['unreadable'])!r})"
    who = f"{_owner_text(owner.get('what', 'restart'))} by Pulse PID {_owner_text(owner.get('pid', '?'))}"
    who += f" on {_owner_text(owner.get('host', '?'))}"
    if owner.get("user"):
        who += f" (user {_owner_text(owner['user'])})"
    since = owner.get("since")
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        try:
            who += " since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
        except (OverflowError, ValueError, OSError):
            return who  # not a time
        now = owner.get("now")
        ago = (now if isinstance(now, (int, float)) and not isinstance(now, bool) else time.time()) - since
        if ago >= 0:
            who += f" ({ago:.0f} s ago)"
    return who
