"""Remote log follower: sent to the target and run there (stdlib only, Python 3.8+).

    follow_agent PATH_OR_GLOB START_OFFSET EXPECTED_INODE POLL_S [HEARTBEAT_S [EXPECTED_HEAD]]

Follows one file by byte offset and writes frames to stdout. A frame is one JSON header
line; a `data` header is followed by exactly `len` raw bytes of the file (binary-safe,
so the local side splits lines and nothing is decoded here). Events:

- `open`      path, inode, size, offset, pid, head: now reading this file from `offset`;
              `head` is its first bytes (up to 256, hex), to tell it from a later file
              that reuses the inode number
- `data`      path, inode, offset, len: the file's bytes [offset, offset+len)
- `truncated` path, inode, size, offset: the file shrank below `offset`; reading restarts at 0
- `rotated`   path, inode (old), new_inode, lost: another file now has the path; the old one
              was read to its end through the open descriptor (`lost`: it could not be found
              again after a restart of this program, so its unread tail is gone)
- `replaced`  path (old), inode (old), new_path, new_inode: a newer file matches the glob
- `missing`   path: nothing at the path (or no match); waiting for it to appear
- `idle`      path, inode, size, mtime, offset: heartbeat while nothing new arrives

A negative START_OFFSET means "that many bytes before the end, from the next line start".
EXPECTED_INODE (non-zero) names the file a previous run of this program was reading: it is
looked for among the matches and in their folders (a renamed, rotated file), so reading
resumes in it; EXPECTED_HEAD (hex), when given, must be how that file still starts. The program exits on stdin EOF (the channel closed) or a broken stdout.
"""

import glob
import json
import os
import select
import sys
import time

CHUNK = 1 << 20
HEAD = 256
#: How often a glob is listed again (a directory listing is dearer than a stat).
RESCAN_S = 1.0


class Output:
    """Frames to a file descriptor; raises BrokenPipeError when the reader is gone."""

    def __init__(self, fd):
        self.fd = fd
        self.last_write = time.monotonic()

    def frame(self, header, payload=b""):
        data = json.dumps(header, separators=(",", ":")).encode() + b"\n"
        if payload:
            data += payload
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self.last_write = time.monotonic()


def has_magic(pattern):
    return any(char in pattern for char in "*?[")


class Source:
    """Which file is the log now: a fixed path, or the newest file matching a glob."""

    def __init__(self, pattern):
        self.pattern = pattern
        self.is_glob = has_magic(pattern)
        self.left = set()
        """Inodes of glob matches this program switched away from: never go back to them."""
        self._matches = []
        self._scanned_at = -RESCAN_S

    def matches(self, fresh=False):
        """(path, stat) of every existing match, newest first."""
        if not self.is_glob:
            try:
                return [(self.pattern, os.stat(self.pattern))]
            except OSError:
                return []
        now = time.monotonic()
        if fresh or now - self._scanned_at >= RESCAN_S:
            found = []
            for path in glob.glob(self.pattern):
                try:
                    found.append((path, os.stat(path)))
                except OSError:
                    continue
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


class Follower:
    """The reading loop: one open file, its inode and the next offset to read."""

    def __init__(self, source, out, poll_s, heartbeat_s, stdin_fd=0):
        self.source = source
        self.out = out
        self.poll_s = poll_s
        self.heartbeat_s = heartbeat_s
        self.stdin_fd = stdin_fd
        self.fd = None
        self.path = None
        self.inode = 0
        self.offset = 0
        self.announced_missing = False

    # -- opening -------------------------------------------------------------

    def open(self, path, offset, inode=None, head=None):
        """Open `path` and start at `offset` (negative: that many bytes before the end).

        Returns False when the file could not be opened (gone since it was listed), or
        when it is not the file with `inode` starting with `head`.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
        stat = os.fstat(fd)
        if (inode is not None and stat.st_ino != inode) or (head and os.pread(fd, len(head), 0) != head):
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
        self.announced_missing = False
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
        """Open the file the source names now; announce `missing` once when there is none."""
        while True:
            found = self.source.current(fresh=True)
            if found is None:
                if not self.announced_missing:
                    self.out.frame({"ev": "missing", "path": self.source.pattern})
                    self.announced_missing = True
                return
            if self.open(found[0], offset, found[1].st_ino):
                return

    # -- reading -------------------------------------------------------------

    def drain(self):
        """Send everything from the offset to the current end; True when a full chunk was read."""
        while True:
            data = os.pread(self.fd, CHUNK, self.offset)
            if not data:
                return False
            self.out.frame(
                {"ev": "data", "path": self.path, "inode": self.inode, "offset": self.offset, "len": len(data)},
                data,
            )
            self.offset += len(data)
            if len(data) == CHUNK:
                return True

    def check(self):
        """After reaching the end: truncation, rotation, a newer match, or the file going away."""
        stat = os.fstat(self.fd)
        if stat.st_size < self.offset:
            self.out.frame(
                {"ev": "truncated", "path": self.path, "inode": self.inode, "size": stat.st_size, "offset": self.offset}
            )
            self.offset = 0
            return
        found = self.source.current()
        if found is None:
            if not self.announced_missing:
                self.out.frame({"ev": "missing", "path": self.source.pattern})
                self.announced_missing = True
            return
        path, new = found
        if new.st_ino == self.inode:
            self.announced_missing = False
            return
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

    def heartbeat(self):
        if time.monotonic() - self.out.last_write < self.heartbeat_s:
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

    def run(self, offset, inode, head=b""):
        """Follow until stdin closes."""
        self.start(offset, inode, head)
        while True:
            busy = False
            if self.fd is None:
                self.open_current(0)
            if self.fd is not None:
                busy = self.drain()
                if not busy:
                    self.check()
            self.heartbeat()
            # A short wait after reaching the end batches a slow writer's lines into one frame.
            if self.hung_up(0 if busy else self.poll_s):
                return


def main(argv):
    pattern, offset, inode, poll_s = os.path.expanduser(argv[0]), int(argv[1]), int(argv[2]), float(argv[3])
    heartbeat_s = float(argv[4]) if len(argv) > 4 else 5.0
    head = bytes.fromhex(argv[5]) if len(argv) > 5 else b""
    follower = Follower(Source(pattern), Output(1), poll_s, heartbeat_s)
    try:
        follower.run(offset, inode, head)
    except BrokenPipeError:
        pass
    finally:
        follower.close()


if __name__ == "__main__":
    main(sys.argv[1:])
