"""Remote log follower: sent to the target and run there (stdlib only, Python 3.8+).

    pulse-follow --path PATH_OR_GLOB --offset START_OFFSET --inode EXPECTED_INODE --poll POLL_S
                 [--heartbeat HEARTBEAT_S] [--batch BATCH_S] [--hold HOLD_S] [--head EXPECTED_HEAD]

Follows one file by byte offset and writes frames to stdout. A frame is one JSON header
line; a `data` header is followed by exactly `len` raw bytes of the file (binary-safe,
so the local side splits lines and nothing is decoded here). Events:

- `hello`     program, protocol, python, pynvml: first, once (console/observe/protocol.py)

- `open`      path, inode, size, offset, pid, head: now reading this file from `offset`;
              `head` is its first bytes (up to 256, hex), to tell it from a later file
              that reuses the inode number
- `data`      path, inode, offset, len, age: the file's bytes [offset, offset+len); `age`: seconds,
              when the frame is written, since the file's mtime as it was when they were read;
              held reads of one file sent together are one frame with `ages`: [[len, age], …],
              one pair per read, in order (`age` is then the last read's)
- `truncated` path, inode, size, offset: the file shrank below `offset`; reading restarts at 0
- `rotated`   path, inode (old), new_inode, lost: another file now has the path; the old one
              was read to its end through the open descriptor (`lost`: it could not be found
              again after a restart of this program, so its unread tail is gone)
- `replaced`  path (old), inode (old), new_path, new_inode: a newer file matches the glob
- `missing`   path: nothing at the path (or no match); waiting for it to appear
- `not_file`  path, mode: the path is not a regular file (a device, a FIFO, a folder: its st_mode);
              it is never read (/dev/zero would never end, a FIFO would block); waiting for a file there
- `idle`      path, inode, size, mtime, offset: heartbeat while nothing new arrives

On Linux the program sleeps in inotify (through libc, by ctypes) on the file and its
folder, so a write is read at once; where inotify is unavailable (no libc, ENOSYS, the
watch limit reached, not Linux) or misses writes (a network filesystem written from
another host), it polls every POLL_S instead.

A negative START_OFFSET means "that many bytes before the end, from the next line start".
EXPECTED_INODE (non-zero) names the file a previous run of this program was reading: it is
looked for among the matches and in their folders (a renamed, rotated file), so reading
resumes in it; EXPECTED_HEAD (hex), when given, must be how that file still starts. The program exits on stdin EOF (the channel closed) or a broken stdout.

HOLD_S (a fleet's node): frames are held and written together every HOLD_S seconds, one write
for all of them, while the file is still read as often as before: each `data` frame keeps the
age of its own bytes, so the console dates lines by their writes, not by the batch.
"""

import argparse
import glob
import json
import os
import select
import stat as stat_mode
import struct
import sys
import time

#: The version of the frames this program writes; the console refuses a follower that speaks another.
PROTOCOL = 1
PROGRAM = "pulse-follow"
CHUNK = 1 << 20
HEAD = 256
#: How often a glob is listed again (a directory listing is dearer than a stat).
RESCAN_S = 1.0
#: With inotify, how often the file is still checked as when polling: the safety net for
#: events inotify does not deliver (writes from another host to a network filesystem).
STAT_EVERY_S = 1.0
#: The shortest time between two wakes by the watcher: a writer that keeps writing has its
#: writes batched into one frame per gap rather than one frame (and one wake) per write.
BATCH_S = 0.02
#: Held frames go out at once past this many bytes of the file (a flood is not held back).
HOLD_BYTES = CHUNK
#: How long bytes that only redraw a progress bar wait for more before they go (see Output.frame):
#: the console draws the bar once a second, with its sample.
REDRAW_HOLD_S = 1.0

# inotify event bits (linux/inotify.h).
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
FILE_EVENTS = IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF
#: Entries coming and going; not IN_MODIFY, so other files written in the folder stay quiet.
FOLDER_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
EVENT_HEADER = struct.Struct("iIII")


class Output:
    """Frames to a file descriptor; raises BrokenPipeError when the reader is gone.

    With `hold_s`, frames wait and go out together once the oldest has waited that long (or
    HOLD_BYTES are waiting): one write, one SSH message, instead of one per read.
    """

    def __init__(self, fd, hold_s=0.0):
        self.fd = fd
        self.hold_s = hold_s
        self.last_write = time.monotonic()
        self.held = []
        self.held_bytes = 0
        self.held_since = 0.0
        self.held_line = False

    def frame(self, header, payload=b"", written_at=None):
        """Write a frame, or hold it; `written_at` (a data frame's mtime) gives its `age` when it is written.

        Without `hold_s`, a frame goes at once, but bytes that only redraw a progress bar (no line
        end) wait up to REDRAW_HOLD_S for more: a bar redrawn ten times a second costs the reader
        one wake-up a second, and a line that comes meanwhile takes them along at once."""
        if not self.held:
            self.held_since = time.monotonic()
            self.held_line = False
        self.held.append((header, payload, written_at))
        self.held_bytes += len(payload)
        self.held_line = self.held_line or header.get("ev") != "data" or b"\n" in payload
        if self.held_bytes >= HOLD_BYTES or (self.hold_s <= 0 and self.held_line):
            self.flush()

    def due_in(self):
        """Seconds until the held frames must go (None: none held)."""
        if not self.held:
            return None
        hold = self.hold_s if self.hold_s > 0 else (0.0 if self.held_line else REDRAW_HOLD_S)
        return max(0.0, self.held_since + hold - time.monotonic())

    def flush(self, due_only=False):
        if not self.held or (due_only and self.due_in() > 0):
            return
        parts = []
        now = time.time()
        for header, payload, reads in _merged(self.held):
            if reads:
                ages = [[length, round(max(0.0, now - written_at), 3)] for length, written_at in reads]
                header["age"] = ages[-1][1]
                if len(ages) > 1:
                    header["ages"] = ages
            parts.append(json.dumps(header, separators=(",", ":")).encode() + b"\n")
            parts.append(payload)
        self.held, self.held_bytes = [], 0
        view = memoryview(b"".join(parts))
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self.last_write = time.monotonic()


def _merged(held):
    """Held frames with each run of data frames that continue one another (same file, the next
    offset) joined into one: (header, payload, [(length, written_at) of each read])."""
    out = []
    for header, payload, written_at in held:
        last = out[-1] if out else None
        if (
            written_at is not None
            and last is not None
            and last[2]
            and last[0]["inode"] == header["inode"]
            and last[0]["path"] == header["path"]
            and last[0]["offset"] + last[0]["len"] == header["offset"]
        ):
            last[0]["len"] += header["len"]
            last[1].append(payload)
            last[2].append((len(payload), written_at))
        else:
            out.append((dict(header), [payload], [(len(payload), written_at)] if written_at is not None else []))
    return [(header, b"".join(payloads), reads) for header, payloads, reads in out]


def has_magic(pattern):
    return any(char in pattern for char in "*?[")


class Source:
    """Which file is the log now: a fixed path, or the newest file matching a glob."""

    def __init__(self, pattern):
        self.pattern = pattern
        self.is_glob = has_magic(pattern)
        self.left = set()
        """Inodes of glob matches this program switched away from: never go back to them."""
        self.not_file = None
        """The st_mode of what the fixed path names when it is not a regular file, else None."""
        self._matches = []
        self._scanned_at = -RESCAN_S

    def matches(self, fresh=False):
        """(path, stat) of every existing match that is a regular file, newest first."""
        if not self.is_glob:
            try:
                stat = os.stat(self.pattern)
            except OSError:
                self.not_file = None
                return []
            self.not_file = None if stat_mode.S_ISREG(stat.st_mode) else stat.st_mode
            return [] if self.not_file is not None else [(self.pattern, stat)]
        now = time.monotonic()
        if fresh or now - self._scanned_at >= RESCAN_S:
            found = []
            for path in glob.glob(self.pattern):
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                if stat_mode.S_ISREG(stat.st_mode):
                    found.append((path, stat))
            found.sort(key=lambda item: (item[1].st_mtime, item[0]), reverse=True)
            self._matches = found
            self._scanned_at = now
        return self._matches

    def current(self, fresh=False):
        """(path, stat) of the file to follow, or None when there is none."""
        for path, stat in self.matches(fresh):
            if stat.st_ino not in self.left:
                return path, stat
        return None

    def find_inode(self, inode):
        """A path to the file with `inode` among the matches or in their folders, or None."""
        for path, stat in self.matches(fresh=True):
            if stat.st_ino == inode:
                return path
        folders = {os.path.dirname(path) for path, _ in self._matches}
        if not self.is_glob or not folders:
            folders.add(os.path.dirname(self.pattern))
        for folder in folders:
            try:
                with os.scandir(folder or ".") as entries:
                    for entry in entries:
                        if entry.inode() == inode and entry.is_file():
                            return entry.path
            except OSError:
                continue
        return None


class Watcher:
    """Linux inotify through libc: its descriptor becomes readable when the followed file or
    the folder it lives in changes."""

    def __init__(self, libc, fd):
        self.libc = libc
        self.fd = fd
        self.file_wd = -1
        self.folder_wd = -1
        self.watching = None
        """(descriptor, inode, folder) the watches are on, or None when they need setting."""

    @classmethod
    def open(cls):
        """A Watcher, or None where inotify is not available."""
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        except (ImportError, OSError, AttributeError):
            return None  # no ctypes, no libc, or a libc without inotify (not Linux)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None  # ENOSYS, or the limit of inotify instances reached
        return cls(libc, fd)

    def follow(self, fd, inode, folder):
        """Watch the open file `fd` (None: no file yet) and `folder`; False when that is not
        possible now (a folder that does not exist, the watch limit reached)."""
        if self.watching == (fd, inode, folder):
            return True
        file_wd = -1
        if fd is not None:
            # Through the descriptor: the path may already name another file.
            file_wd = self.libc.inotify_add_watch(self.fd, b"/proc/self/fd/%d" % fd, FILE_EVENTS)
            if file_wd < 0:
                return False
        folder_wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), FOLDER_EVENTS | IN_ONLYDIR)
        if folder_wd < 0:
            self._forget(file_wd, (self.file_wd,))
            return False
        self._forget(self.file_wd, (file_wd, folder_wd))
        self._forget(self.folder_wd, (file_wd, folder_wd))
        self.file_wd, self.folder_wd, self.watching = file_wd, folder_wd, (fd, inode, folder)
        return True

    def _forget(self, wd, kept):
        if wd >= 0 and wd not in kept:
            self.libc.inotify_rm_watch(self.fd, wd)

    def pending(self):
        """True when events wait to be read."""
        return bool(select.select([self.fd], [], [], 0)[0])

    def read(self):
        """Consume the waiting events; True when the folder's entries changed (or events were lost)."""
        entries_changed = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return entries_changed
            at = 0
            while at < len(data):
                wd, mask, _, name_len = EVENT_HEADER.unpack_from(data, at)
                at += EVENT_HEADER.size + name_len
                if mask & IN_Q_OVERFLOW or (wd == self.folder_wd and mask & FOLDER_EVENTS):
                    entries_changed = True
                if mask & IN_IGNORED and wd in (self.file_wd, self.folder_wd):
                    # The file was deleted or the folder removed: set the watches again.
                    self.file_wd = -1 if wd == self.file_wd else self.file_wd
                    self.folder_wd = -1 if wd == self.folder_wd else self.folder_wd
                    self.watching = None
                    entries_changed = True

    def close(self):
        os.close(self.fd)


class Follower:
    """The reading loop: one open file, its inode and the next offset to read."""

    def __init__(self, source, out, poll_s, heartbeat_s, stdin_fd=0, watcher=None, batch_s=BATCH_S):
        """`watcher`: a Watcher to sleep in between changes; None polls every `poll_s`."""
        self.source = source
        self.out = out
        self.poll_s = poll_s
        self.batch_s = batch_s
        self.heartbeat_s = heartbeat_s
        self.stdin_fd = stdin_fd
        self.watcher = watcher
        self.fd = None
        self.path = None
        self.inode = 0
        self.offset = 0
        self.announced = None
        """The `missing` or `not_file` frame last sent, so each is said once."""
        self.woke_at = 0.0
        self.caught_up = False

    # -- opening -------------------------------------------------------------

    def open(self, path, offset, inode=None, head=None):
        """Open `path` and start at `offset` (negative: that many bytes before the end).

        Returns False when the file could not be opened (gone since it was listed), when it is
        no longer a regular file, or when it is not the file with `inode` starting with `head`.
        """
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put there since it was listed must not block
        except OSError:
            return False
        stat = os.fstat(fd)
        if (
            not stat_mode.S_ISREG(stat.st_mode)
            or (inode is not None and stat.st_ino != inode)
            or (head and os.pread(fd, len(head), 0) != head)
        ):
            os.close(fd)
            return False
        if offset < 0:
            offset = self.line_start_before(fd, stat.st_size + offset)
        elif offset > stat.st_size:
            self.out.frame(
                {"ev": "truncated", "path": path, "inode": stat.st_ino, "size": stat.st_size, "offset": offset}
            )
            offset = 0
        self.close()
        self.fd, self.path, self.inode, self.offset = fd, path, stat.st_ino, offset
        self.announced = None
        self.out.frame(
            {
                "ev": "open",
                "path": path,
                "inode": self.inode,
                "size": stat.st_size,
                "offset": offset,
                "pid": os.getpid(),
                "head": os.pread(fd, HEAD, 0).hex(),
            }
        )
        return True

    @staticmethod
    def line_start_before(fd, position):
        """The offset of the first line that starts at or after `position` (0 if before the start)."""
        if position <= 0:
            return 0
        at = position - 1
        while True:
            block = os.pread(fd, 65536, at)
            if not block:
                return at
            newline = block.find(b"\n")
            if newline >= 0:
                return at + newline + 1
            at += len(block)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def start(self, offset, inode, head):
        """Open the file to follow at start: the one with `inode` (and `head`) when it still exists."""
        if inode:
            path = self.source.find_inode(inode)
            if path is not None and self.open(path, offset, inode, head):
                return
            found = self.source.current(fresh=True)
            self.out.frame(
                {
                    "ev": "rotated",
                    "path": self.source.pattern,
                    "inode": inode,
                    "new_inode": found[1].st_ino if found else 0,
                    "lost": True,
                }
            )
            offset = 0
        self.open_current(offset)

    def open_current(self, offset):
        """Open the file the source names now; announce once when there is none."""
        while True:
            found = self.source.current(fresh=True)
            if found is None:
                self.announce_absent()
                return
            if self.open(found[0], offset, found[1].st_ino):
                return

    def announce_absent(self):
        """Say once that there is no file to follow: nothing at the path (`missing`), or what is
        there is not a regular file (`not_file`)."""
        frame = {"ev": "missing", "path": self.source.pattern}
        if self.source.not_file is not None:
            frame = {"ev": "not_file", "path": self.source.pattern, "mode": self.source.not_file}
        if frame != self.announced:
            self.announced = dict(frame)
            self.out.frame(frame)

    # -- reading -------------------------------------------------------------

    def drain(self):
        """Send everything from the offset to the current end; True when a full chunk was read."""
        while True:
            data = os.pread(self.fd, CHUNK, self.offset)
            if not data:
                return False
            # How long ago the file was last written, by this host's clock alone (Output writes it
            # as `age`): the reader dates the bytes by it (a backlog read at start-up is history).
            self.out.frame(
                {"ev": "data", "path": self.path, "inode": self.inode, "offset": self.offset, "len": len(data)},
                data,
                written_at=os.fstat(self.fd).st_mtime,
            )
            self.offset += len(data)
            if len(data) == CHUNK:
                return True

    def check(self, fresh=False):
        """After reaching the end: truncation, rotation, a newer match, or the file going away.

        `fresh`: list a glob's matches again now. True when reading restarts (at 0 or in
        another file), so the caller reads on without waiting.
        """
        stat = os.fstat(self.fd)
        if stat.st_size < self.offset:
            self.out.frame(
                {"ev": "truncated", "path": self.path, "inode": self.inode, "size": stat.st_size, "offset": self.offset}
            )
            self.offset = 0
            return True
        found = self.source.current(fresh)
        if found is None:
            self.announce_absent()
            return False
        path, new = found
        if new.st_ino == self.inode:
            self.announced = None
            return False
        # Lines written just before the switch are still in the old file: read them first.
        while self.drain():
            pass
        if self.source.is_glob:
            self.source.left.add(self.inode)
            self.out.frame(
                {"ev": "replaced", "path": self.path, "inode": self.inode, "new_path": path, "new_inode": new.st_ino}
            )
        else:
            self.out.frame({"ev": "rotated", "path": self.path, "inode": self.inode, "new_inode": new.st_ino, "lost": False})
        if not self.open(path, 0, new.st_ino):
            self.open_current(0)
        return True

    def heartbeat(self):
        if self.out.held or time.monotonic() - self.out.last_write < self.heartbeat_s:
            return
        header = {"ev": "idle", "path": self.path or self.source.pattern, "inode": self.inode, "offset": self.offset}
        if self.fd is not None:
            stat = os.fstat(self.fd)
            header.update(size=stat.st_size, mtime=stat.st_mtime)
        else:
            header.update(size=0, mtime=0.0)
        self.out.frame(header)

    def hung_up(self, wait_s):
        """Wait up to `wait_s` for stdin; True when it reached EOF (the channel closed)."""
        readable, _, _ = select.select([self.stdin_fd], [], [], wait_s)
        if not readable:
            return False
        return not os.read(self.stdin_fd, 4096)

    def watch(self):
        """Point the watcher at the file followed now and its folder; False when there is no
        watcher or it cannot watch them (the loop then polls)."""
        if self.watcher is None:
            return False
        folder = os.path.dirname(self.path if self.fd is not None else self.source.pattern) or "."
        if has_magic(folder):
            return False  # no file yet, and its folder is itself a glob
        return self.watcher.follow(self.fd, self.inode, folder)

    def wait(self, watching):
        """Sleep until the next read is due: a change the watcher saw, STAT_EVERY_S (the safety
        net), the next heartbeat or held frames' time, or without watching, `poll_s`.

        Returns (stdin reached EOF, the watcher slept to its timeout, the folder's entries changed).
        """
        due = self.out.due_in()
        # Held frames go out when they are due, and stand for a heartbeat until then.
        wake_in = due if due is not None else max(0.0, self.out.last_write + self.heartbeat_s - time.monotonic())
        if not watching:
            # A short wait after reaching the end batches a slow writer's lines into one frame.
            return self.hung_up(min(self.poll_s, wake_in)), False, False
        readable, _, _ = select.select([self.stdin_fd, self.watcher.fd], [], [], min(STAT_EVERY_S, wake_in))
        if self.stdin_fd in readable and not os.read(self.stdin_fd, 4096):
            return True, False, False
        if self.watcher.fd not in readable:
            return False, not readable, False
        entries_changed = self.watcher.read()
        pause = self.woke_at + self.batch_s - time.monotonic()
        if pause > 0 and self.hung_up(pause):
            return True, False, False
        self.woke_at = time.monotonic()
        return False, False, entries_changed

    def run(self, offset, inode, head=b""):
        """Follow until stdin closes."""
        self.start(offset, inode, head)
        timed_out = entries_changed = False
        while True:
            if self.fd is None:
                self.open_current(0)
            # Watches first: a write after the reading below then wakes the wait.
            watching = self.watch()
            busy = False
            if self.fd is not None:
                read_before = self.offset
                busy = self.drain()
                if timed_out and watching and self.offset > read_before and not self.watcher.pending():
                    # Bytes arrived that inotify never announced (a network filesystem
                    # written from another host): poll from now on.
                    self.watcher.close()
                    self.watcher = None
                    watching = False
                busy = busy or self.check(entries_changed)
            self.heartbeat()
            # The backlog, read to the end once, goes at once (the console is waiting for it); held from then on.
            self.out.flush(due_only=self.caught_up)
            self.caught_up = self.caught_up or (self.fd is not None and not busy)
            if busy:
                if self.hung_up(0):
                    return
                timed_out = entries_changed = False
                continue
            hung_up, timed_out, entries_changed = self.wait(watching)
            if hung_up:
                return


def build_parser():
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Follow a log file by byte offset.", allow_abbrev=False)
    need = parser.add_argument_group("required")
    need.add_argument("--path", required=True, help="the log's path or glob")
    need.add_argument("--offset", type=int, required=True, help="byte to start at; negative: that many before the end")
    need.add_argument("--inode", type=int, required=True, help="the file a previous run was reading, or 0")
    need.add_argument("--poll", type=float, required=True, help="seconds between polls without inotify")
    parser.add_argument("--heartbeat", type=float, default=5.0, help="seconds of quiet before an `idle` frame")
    parser.add_argument(
        "--batch", type=float, default=BATCH_S, help="with inotify, seconds at least between two reads (lines gathered)"
    )
    parser.add_argument(
        "--hold", type=float, default=0.0, help="seconds frames are held and written together (each keeps its age)"
    )
    parser.add_argument("--head", type=bytes.fromhex, default=b"", help="hex of how the --inode file starts")
    return parser


def hello():
    """The first frame (console/observe/protocol.py reads it); this program never loads pynvml."""
    python = "%d.%d.%d" % sys.version_info[:3]
    return {"ev": "hello", "program": PROGRAM, "protocol": PROTOCOL, "python": python, "pynvml": None}


def main(argv):
    args = build_parser().parse_args(argv)
    out = Output(1, args.hold)
    follower = Follower(
        Source(os.path.expanduser(args.path)), out, args.poll, args.heartbeat, watcher=Watcher.open(), batch_s=args.batch
    )
    try:
        out.frame(hello())
        follower.run(args.offset, args.inode, args.head)
    except BrokenPipeError:
        pass
    finally:
        follower.close()
        if follower.watcher is not None:
            follower.watcher.close()


if __name__ == "__main__":
    main(sys.argv[1:])
