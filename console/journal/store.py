"""The journal database: one SQLite file per run, written by a thread, read by anyone.

Layout (`PRAGMA user_version` 1):

    entries(id, time, kind, text, data)   time: Unix seconds; kind: verdict | action | problem |
                                          connection | gpu_memory | alert | log | watch;
                                          data: a JSON object (evidence, gap_s, outcome, ...)
    minutes(minute, metric, count, min, median, max)
                                          one row per Unix minute and metric (tokens_per_s,
                                          samples_per_s, it_per_s, loss, and each GPU's
                                          gpu{N}.util_pct, gpu{N}.memory_pct, gpu{N}.power_w)
    lease(holder, expires)                which writer journals observations now

Writes are queued by `add` / `set_minute` (cheap, any thread) and committed by one thread
every FLUSH_S, so a writer killed at any moment loses at most its last FLUSH_S of records:
WAL with synchronous=NORMAL keeps every committed transaction through a process crash
(only an OS crash or power cut may take the last commits back).

Two writers on one run (two consoles, or a console and `pulse watch`) share the file safely:
SQLite serialises their transactions (each waits up to BUSY_TIMEOUT_MS in the writer thread,
never in the caller), and only the holder of the lease journals observations (verdicts,
problems, rates, connection, GPU memory), so they are not written twice. The lease lasts
LEASE_S and is renewed by every flush; when its holder dies another writer takes it over.
Actions and alerts are journaled by whichever writer saw them.

Bounds: rows older than MAX_AGE_S (30 days) are deleted, and when the file grows past
MAX_BYTES (64 MiB) the oldest tenth of the rows goes until it fits; checked on open and
every PRUNE_EVERY_S. At one throughput line a second a day takes about 0.2 MB.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from console import paths
from console.config import Config
from console.state import RATE_METRICS

if TYPE_CHECKING:
    from console.slowness import Baseline

FLUSH_S = 0.5
LEASE_S = 10.0
BUSY_TIMEOUT_MS = 5000
MAX_AGE_S = 30 * 86400.0
MAX_BYTES = 64 * 1024 * 1024
PRUNE_EVERY_S = 600.0
#: How far back a learned baseline looks: a week of the run's history (the journal keeps MAX_AGE_S).
HISTORY_S = 7 * 86400.0
#: Entries held while commits fail; past it new ones are dropped (and counted), memory stays bounded.
MAX_QUEUED = 100_000
#: Values kept per open minute and metric for its median (a log printing faster is sampled).
MINUTE_VALUES = 6000

#: Kinds only the lease holder journals: what every writer on the run sees alike.
OBSERVATION_KINDS = frozenset({"verdict", "problem", "connection", "gpu_memory", "log"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries(
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS entries_by_time ON entries(time);
CREATE TABLE IF NOT EXISTS minutes(
    minute INTEGER NOT NULL,
    metric TEXT NOT NULL,
    count INTEGER NOT NULL,
    min REAL NOT NULL,
    median REAL NOT NULL,
    max REAL NOT NULL,
    PRIMARY KEY(minute, metric)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lease(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    expires REAL NOT NULL
);
"""


def journal_path(config: Config) -> Path:
    """Where `config`'s run keeps its journal: the state folder, one file per run: its target (host,
    port, container), its log as configured (a `{started}` pattern stays one run across relaunches),
    its match and pidfile, and its name.

    Two watches of one run share the file (its lease makes one of them the writer); two runs never
    do, even when every flag-only run is named "run". The name is readable
    (`root@gpu1-pct200-train-….sqlite3`) with a short hash of the exact identity.

    A Slurm job's (`[target] slurm_job`) is the job's: its ID on the cluster whose Slurm is asked
    (the `[target] host` its commands run on, a login node, else this machine), whatever the config
    names of the run (`login1-slurm-4242-….sqlite3`): `pulse journal --slurm-job ID` finds it.
    """
    target = config.target
    if target.slurm_job:
        control = target.host or "local"
        return _journal_file((control, f"slurm-{target.slurm_job}"), ("slurm", control, str(target.port or ""), target.slurm_job))
    container = target.container.describe().replace(" ", "") if target.container else ""
    run = config.run
    identity = (target.host or "local", str(target.port or ""), container, run.name, run.log or "", run.match or "",
                run.pidfile or "")
    return _journal_file((target.host or "local", container, config.run.name), identity)


def _journal_file(readable: tuple[str, ...], identity: tuple[str, ...]) -> Path:
    """The journal file named by the `readable` parts (filename-safe, cut short) and a hash of the exact `identity`."""
    name = re.sub(r"[^A-Za-z0-9@._-]+", "_", "-".join(p for p in readable if p))
    digest = hashlib.sha256("\0".join(identity).encode()).hexdigest()[:8]
    return paths.state_dir() / "journal" / f"{name[:80]}-{digest}.sqlite3"


def last_demo_pointer() -> Path:
    """The file where `pulse demo` names its run's journal, for `pulse journal --demo` and `report --demo`."""
    return paths.state_dir() / "journal" / "last-demo.txt"


class JournalError(Exception):
    """The journal cannot be opened or read: one line naming the file."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing that happened to the run, as journaled."""

    time: float
    kind: str
    text: str
    data: dict

    def as_json(self) -> dict:
        return {"time": self.time, "kind": self.kind, "text": self.text, "data": self.data}


@dataclass(frozen=True, slots=True)
class Minute:
    """One metric over one minute: how many values, and their min / median / max."""

    minute: int
    """Unix time // 60."""
    metric: str
    count: int
    min: float
    median: float
    max: float

    def as_json(self) -> dict:
        return {"time": self.minute * 60, "metric": self.metric, "count": self.count,
                "min": self.min, "median": self.median, "max": self.max}


def _connect(path: Path) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
            # auto_vacuum must be chosen before the first table exists, so that pruning shrinks the file.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        conn.execute("PRAGMA user_version = 1")
    except sqlite3.DatabaseError as exc:
        raise JournalError(f"{path}: cannot open the journal: {exc}") from None
    except OSError as exc:
        raise JournalError(f"{path}: cannot create the journal's folder: {exc.strerror}") from None
    return conn


class Journal:
    """One run's journal file; `start()` the writer thread, `close()` to flush and stop it."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_age_s: float = MAX_AGE_S,
        max_bytes: int = MAX_BYTES,
        flush_s: float = FLUSH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self.flush_s = flush_s
        self.clock = clock
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.leader = False
        """True while this writer holds the lease (journals observations, fires alerts)."""
        self.writes = 0
        """Rows inserted or updated so far (for the figures in scripts/bench_journal.py)."""
        self.commits = 0
        """Transactions committed so far (each flush with something to write is one)."""
        self.dropped = 0
        """Entries dropped because MAX_QUEUED were waiting for a file that would not take them."""
        self._conn = _connect(self.path)
        self._db_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._entries: list[tuple[float, str, str, str]] = []
        self._minutes: dict[tuple[int, str], list[float]] = {}
        self._changed_minutes: set[tuple[int, str]] = set()
        self._lease_until = 0.0
        self._pruned_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.prune()

    # -- writing -------------------------------------------------------------------------

    def add(self, kind: str, text: str, data: dict | None = None, *, at: float | None = None) -> None:
        """Queue an entry (committed within flush_s by the writer thread)."""
        row = (self.clock() if at is None else at, kind, text, json.dumps(data or {}, default=str, ensure_ascii=False))
        with self._pending_lock:
            if len(self._entries) >= MAX_QUEUED:
                self.dropped += 1  # the file has refused commits for a long while (disk full, held lock)
                return
            self._entries.append(row)

    def add_values(self, metric: str, values: Iterable[tuple[float, float]]) -> None:
        """Queue (Unix time, value) points of a metric into their minutes' min / median / max."""
        with self._pending_lock:
            for at, value in values:
                key = (int(at // 60), metric)
                bucket = self._minutes.setdefault(key, [])
                if len(bucket) < MINUTE_VALUES:
                    bucket.append(value)
                    self._changed_minutes.add(key)

    def start(self) -> Journal:
        """Start the writer thread (a daemon: it must never keep a killed console alive)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pulse journal writer", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and close the file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush(release=True)
        with self._db_lock:
            self._conn.close()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            try:
                self.flush()
                if self.clock() - self._pruned_at >= PRUNE_EVERY_S:
                    self.prune()
            except sqlite3.Error:
                continue  # locked past the busy timeout or a full disk: the rows stay queued for the next flush

    def flush(self, *, release: bool = False) -> int:
        """Commit the queued rows in one transaction; returns how many were written.

        Observations are kept only while this writer holds the lease; `release` gives it up.
        """
        now = self.clock()
        with self._pending_lock:
            entries, self._entries = self._entries, []
            changed, self._changed_minutes = self._changed_minutes, set()
            open_minutes = {key: tuple(self._minutes[key]) for key in changed}
            # A minute's values stay (its median needs them all) until the clock has left it.
            this_minute = int(now // 60)
            self._minutes = {key: values for key, values in self._minutes.items() if key[0] >= this_minute - 1}
        renew = self._lease_until - now < LEASE_S / 2 or release
        if not (entries or open_minutes or renew):
            return 0
        with self._db_lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                self._requeue(entries, changed)
                raise
            try:
                if renew:
                    self._renew_lease(conn, now, release)
                if not self.leader:
                    entries = [row for row in entries if row[1] not in OBSERVATION_KINDS]
                    open_minutes = {}
                conn.executemany("INSERT INTO entries(time, kind, text, data) VALUES (?, ?, ?, ?)", entries)
                conn.executemany(
                    "INSERT OR REPLACE INTO minutes VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (minute, metric, len(values), min(values), statistics.median(values), max(values))
                        for (minute, metric), values in open_minutes.items()
                    ],
                )
                conn.execute("COMMIT")
            except sqlite3.Error:
                conn.execute("ROLLBACK")
                self._requeue(entries, changed)
                raise
        self.commits += 1
        if release:
            self.leader = False
        written = len(entries) + len(open_minutes)
        self.writes += written
        return written

    def _requeue(self, entries: list, changed: set) -> None:
        with self._pending_lock:
            self._entries[:0] = entries
            self._changed_minutes |= changed & self._minutes.keys()

    def _renew_lease(self, conn: sqlite3.Connection, now: float, release: bool) -> None:
        row = conn.execute("SELECT holder, expires FROM lease WHERE id = 1").fetchone()
        self.leader = row is None or row[0] == self.holder or row[1] < now
        if release:
            if row is not None and row[0] == self.holder:
                conn.execute("DELETE FROM lease WHERE id = 1")  # this last flush still journals as the holder
        elif self.leader:
            self._lease_until = now + LEASE_S
            conn.execute("INSERT OR REPLACE INTO lease VALUES (1, ?, ?)", (self.holder, self._lease_until))
        else:
            self._lease_until = 0.0  # ask again next flush: the holder may have gone

    def take_lease(self) -> bool:
        """Try for the lease now (at start, so the first observations are not dropped); a file
        locked past the busy timeout leaves it to the next flush."""
        with self._db_lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                return False
            try:
                self._renew_lease(self._conn, self.clock(), False)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return self.leader

    def prune(self) -> None:
        """Delete rows past max_age_s, then the oldest tenth at a time while the file exceeds max_bytes."""
        now = self.clock()
        self._pruned_at = now
        cutoff = now - self.max_age_s
        with self._db_lock:
            conn = self._conn
            conn.execute("DELETE FROM entries WHERE time < ?", (cutoff,))
            conn.execute("DELETE FROM minutes WHERE minute < ?", (int(cutoff // 60),))
            while self._used_bytes(conn) > self.max_bytes:
                oldest = conn.execute(
                    "SELECT time FROM entries ORDER BY time LIMIT 1 OFFSET (SELECT COUNT(*) / 10 FROM entries)"
                ).fetchone()
                first_minute = conn.execute(
                    "SELECT minute FROM minutes ORDER BY minute LIMIT 1 OFFSET (SELECT COUNT(*) / 10 FROM minutes)"
                ).fetchone()
                if oldest is None and first_minute is None:
                    break
                if oldest is not None:
                    conn.execute("DELETE FROM entries WHERE time <= ?", oldest)
                if first_minute is not None:
                    conn.execute("DELETE FROM minutes WHERE minute <= ?", first_minute)
                self._vacuum(conn)
            self._vacuum(conn)

    @staticmethod
    def _vacuum(conn: sqlite3.Connection) -> None:
        """Hand freed pages back to the file system (execute() would free one page per call)."""
        conn.executescript("PRAGMA incremental_vacuum;")

    @staticmethod
    def _used_bytes(conn: sqlite3.Connection) -> int:
        pages = conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
        return pages * conn.execute("PRAGMA page_size").fetchone()[0]

    # -- reading ---------------------------------------------------------------------------

    def entries(self, since: float | None = None, kinds: Iterable[str] | None = None) -> list[Entry]:
        """Committed entries from `since` (Unix time) on, oldest first."""
        return read_entries(self._conn, since, kinds, self._db_lock)

    def minutes(self, since: float | None = None, metrics: Iterable[str] | None = None) -> list[Minute]:
        """Committed minutes from `since` on, oldest first (only `metrics`' when given)."""
        return read_minutes(self._conn, since, self._db_lock, metrics)

    def window(self, start: float) -> tuple[list[Entry], list[Minute]]:
        """What `read_window` reads, from this journal's committed rows."""
        return read_window(self._conn, start, self._db_lock)


def open_for_reading(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection for `pulse journal` / `pulse report`: JournalError when there is no journal."""
    path = Path(path)
    if not path.exists():
        raise JournalError(f"{path}: no journal yet (run the console or `pulse watch` on this config first)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute("SELECT 1 FROM entries LIMIT 1")
    except sqlite3.DatabaseError as exc:
        raise JournalError(f"{path}: not a Pulse journal: {exc}") from None
    return conn


def read_entries(conn: sqlite3.Connection, since: float | None = None, kinds: Iterable[str] | None = None,
                 lock: threading.Lock | None = None) -> list[Entry]:
    query = "SELECT time, kind, text, data FROM entries WHERE time >= ?"
    args: list[object] = [since or 0.0]
    if kinds is not None:
        kinds = list(kinds)
        query += f" AND kind IN ({', '.join('?' * len(kinds))})"
        args += kinds
    with lock or threading.Lock():
        rows = conn.execute(query + " ORDER BY time, id", args).fetchall()
    return [Entry(t, kind, text, json.loads(data)) for t, kind, text, data in rows]


def read_minutes(conn: sqlite3.Connection, since: float | None = None, lock: threading.Lock | None = None,
                 metrics: Iterable[str] | None = None) -> list[Minute]:
    """Minutes from `since` on, oldest first: every metric's, or only those of `metrics`."""
    chosen = None if metrics is None else tuple(metrics)
    where = "" if chosen is None else f" AND metric IN ({', '.join('?' * len(chosen))})"
    with lock or threading.Lock():
        rows = conn.execute(
            f"SELECT minute, metric, count, min, median, max FROM minutes WHERE minute >= ?{where} ORDER BY minute, metric",
            (int((since or 0.0) // 60), *(chosen or ())),
        ).fetchall()
    return [Minute(*row) for row in rows]


def rate_histories(minutes: Iterable[Minute]) -> dict[str, Baseline]:
    """The run's best sustained rate of each throughput metric across its journal (console.slowness.from_journal)."""
    from console.slowness import from_journal  # here: the console's first frame does not wait for it

    by_metric: dict[str, list[tuple[float, float]]] = {}
    for m in minutes:
        if m.metric in RATE_METRICS:
            by_metric.setdefault(m.metric, []).append((m.minute * 60.0, m.median))
    return {metric: found for metric, rows in by_metric.items() if (found := from_journal(rows)) is not None}


def read_rate_histories(config: Config, since_s: float = HISTORY_S) -> dict[str, Baseline]:
    """rate_histories of `config`'s run from its journal file, {} when it has none (or it cannot be read)."""
    path = journal_path(config)
    if not path.exists():
        return {}
    try:
        conn = open_for_reading(path)
    except JournalError:
        return {}
    try:
        return rate_histories(read_minutes(conn, time.time() - since_s, metrics=RATE_METRICS))
    except sqlite3.Error:
        return {}
    finally:
        conn.close()


def read_window(conn: sqlite3.Connection, start: float, lock: threading.Lock | None = None) -> tuple[list[Entry], list[Minute]]:
    """Entries and minutes from `start` on; the entries open with the verdict in force at `start`
    (the last change before it), so a window always says what state the run was in."""
    entries = read_entries(conn, start, None, lock)
    with lock or threading.Lock():
        before = conn.execute(
            "SELECT time, kind, text, data FROM entries WHERE kind = 'verdict' AND time < ? ORDER BY time DESC, id DESC LIMIT 1",
            (start,),
        ).fetchone()
    if before is not None:
        entries.insert(0, Entry(before[0], before[1], before[2], json.loads(before[3])))
    return entries, read_minutes(conn, start, lock)
