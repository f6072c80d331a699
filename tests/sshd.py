"""A real OpenSSH server on 127.0.0.1 for tests, and a stand-in container (a PID namespace).

`start_sshd(dir)` starts /usr/sbin/sshd in the foreground as a child of the test process, with
its own sshd_config, a throwaway ed25519 host key and client key, a free port, and `tests/bin`
first on the PATH of the commands it runs (so the stand-in `pct` is found). `PidNamespace`
starts `unshare --pid --fork --mount-proc sleep infinity` and registers it under an ID that
`tests/bin/pct exec ID -- CMD` enters with nsenter. Everything is stopped by PID.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from console.config import TargetConfig
from console.demo.server import pinned_ssh_config
from console.model import Container

SSHD = "/usr/sbin/sshd"
TESTS_BIN = Path(__file__).resolve().parent / "bin"
ALIAS = "pulse-test"
PCT_REGISTRY = Path("/tmp/pulse-test-pct")
#: The sessions' PATH: the stand-ins first, then root's usual PATH.
SESSION_PATH = f"{TESTS_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (all its threads), from /proc."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in tasks:
        try:
            found += [int(p) for p in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except FileNotFoundError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    """All descendants of `pid`, parents before children."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        kids = [k for p in frontier for k in _children(p)]
        found += kids
        frontier = kids
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going (a zombie being reaped reads ESRCH)
        return ""


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class SshServer:
    """One running /usr/sbin/sshd on 127.0.0.1 and the files a client needs to reach it."""

    host = "127.0.0.1"
    alias = ALIAS

    def __init__(self, dir: Path, sshd_options: dict[str, object]) -> None:
        self.dir = Path(dir)
        self.user = getpass.getuser()
        self.port = _free_port()
        self.sshd_options = dict(sshd_options)
        self.host_key = self.dir / "host_ed25519"
        self.client_key = self.dir / "client_ed25519"
        self.authorized_keys = self.dir / "authorized_keys"
        self.known_hosts = self.dir / "known_hosts"
        self.ssh_config = self.dir / "ssh_config"
        self.sshd_config = self.dir / "sshd_config"
        self.log = self.dir / "sshd.log"
        self._process: subprocess.Popen | None = None
        self._log_file = None
        _keygen(self.host_key, "pulse-test-host")
        _keygen(self.client_key, "pulse-test-client")
        self.authorized_keys.write_text(Path(f"{self.client_key}.pub").read_text())
        self.write_known_hosts()
        self._write_configs()

    @property
    def host_key_line(self) -> str:
        """The server's public host key as `type base64` (no host field)."""
        kind, blob, *_ = Path(f"{self.host_key}.pub").read_text().split()
        return f"{kind} {blob}"

    def write_known_hosts(self) -> None:
        """(Re)write known_hosts to hold exactly this server's host key, under both names."""
        self.known_hosts.write_text(
            f"[{self.host}]:{self.port} {self.host_key_line}\n[{self.alias}]:{self.port} {self.host_key_line}\n"
        )

    def new_host_key(self) -> None:
        """Give the server a fresh host key (restart it to use it): a 'changed key' for clients."""
        for path in (self.host_key, Path(f"{self.host_key}.pub")):
            path.unlink()
        _keygen(self.host_key, "pulse-test-host")

    def _write_configs(self) -> None:
        options: dict[str, object] = {
            "ListenAddress": self.host,
            "Port": self.port,
            "HostKey": self.host_key,
            "PidFile": self.dir / "sshd.pid",
            "UsePAM": "no",
            "StrictModes": "no",
            "PermitRootLogin": "prohibit-password",
            "PasswordAuthentication": "no",
            "KbdInteractiveAuthentication": "no",
            "PubkeyAuthentication": "yes",
            "AuthorizedKeysFile": self.authorized_keys,
            # A login shell killed mid `pyenv rehash` (fault tests kill sessions) leaves a lock
            # that makes every later login shell wait 60 s: bound that wait for test sessions.
            "SetEnv": f"PATH={SESSION_PATH} PYENV_REHASH_TIMEOUT=2",
            "LogLevel": "VERBOSE",
            **self.sshd_options,
        }
        self.sshd_config.write_text("".join(f"{key} {value}\n" for key, value in options.items()))
        self.ssh_config.write_text(
            pinned_ssh_config(self.alias, self.host, self.port, self.user, self.client_key, self.known_hosts)
        )

    @property
    def pid(self) -> int | None:
        """PID of the listening sshd, None while stopped."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start sshd in the foreground and wait until its port accepts connections."""
        if self._process is not None:
            return
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self._log_file = open(self.log, "ab")
        self._process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.sshd_config)],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=self._log_file,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                self._process = None
                raise RuntimeError(f"sshd exited at start; see {self.log}: {self.log.read_text()[-500:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"sshd did not listen on {self.host}:{self.port}; see {self.log}")
                time.sleep(0.02)

    def connection_pids(self) -> list[int]:
        """PIDs of the per-connection sshd processes (direct children of the listener)."""
        return _children(self.pid) if self.pid is not None else []

    def kill_connections(self) -> None:
        """Kill every server-side connection process by PID; the listener keeps listening."""
        for pid in self.connection_pids():
            _signal([pid, *_descendants(pid)], signal.SIGKILL)

    def stop(self) -> None:
        """Stop the listener and every connection and command it started (by PID)."""
        if self._process is None:
            return
        tree = _descendants(self._process.pid)
        _signal([self._process.pid], signal.SIGCONT)
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        _signal(tree, signal.SIGKILL)
        self._process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def restart(self) -> None:
        """Stop and start again on the same port: every client connection is lost."""
        self.stop()
        self.start()

    def _sshd_tree(self) -> list[int]:
        if self.pid is None:
            return []
        return [self.pid, *(p for p in _descendants(self.pid) if _comm(p) == "sshd")]

    def pause(self) -> None:
        """SIGSTOP the listener and its connection processes: the server goes silent."""
        _signal(self._sshd_tree(), signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT what pause() stopped."""
        _signal(self._sshd_tree(), signal.SIGCONT)

    def target_config(self, container: Container | None = None, **overrides) -> TargetConfig:
        """A TargetConfig that reaches this server through its ssh_config alias."""
        fields = {
            "host": self.alias,
            "container": container,
            "ssh_config": str(self.ssh_config),
            "known_hosts": str(self.known_hosts),
            **overrides,
        }
        return TargetConfig(**fields)

    def ssh_argv(self, command: str) -> list[str]:
        """argv for the OpenSSH client running `command` on this server."""
        return ["ssh", "-F", str(self.ssh_config), self.alias, command]


def start_sshd(dir: Path, **sshd_options: object) -> SshServer:
    """A started SshServer in `dir`; keyword arguments are extra sshd_config keywords (MaxSessions=3)."""
    server = SshServer(Path(dir), sshd_options)
    server.start()
    return server


class PidNamespace:
    """A persistent PID + mount namespace that `tests/bin/pct exec ID --` enters: a stand-in container."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
        )
        self.init_pid = self._wait_for_init()
        # Each test run has a PID namespace of its own and PIDs repeat across them; the registry in
        # /tmp is shared, so the ID names the namespace too.
        self.id = f"{os.stat('/proc/self/ns/pid').st_ino}-{self._process.pid}"
        self.container = Container(kind="pct", id=self.id)
        PCT_REGISTRY.mkdir(exist_ok=True)
        self._registry = PCT_REGISTRY / self.id
        self._registry.write_text(f"{self.init_pid}\n")

    def _wait_for_init(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"unshare exited with {self._process.returncode}; PID namespaces unavailable")
            children = _children(self._process.pid)
            # unshare forks the namespace's PID 1, which then execs sleep.
            if children and _comm(children[0]) == "sleep":
                return children[0]
            time.sleep(0.01)
        self.close()
        raise RuntimeError("unshare did not start its namespace's init in time")

    def close(self) -> None:
        """Kill the namespace's init (every process inside dies with it) and forget the ID."""
        if getattr(self, "_registry", None) is not None:
            self._registry.unlink(missing_ok=True)
        if getattr(self, "init_pid", None) is not None:
            _signal([self.init_pid], signal.SIGKILL)
        self._process.kill()
        self._process.wait()

    def __enter__(self) -> PidNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
