"""An in-process SSH server on 127.0.0.1 that serves exec requests the way sshd does.

`pulse demo` points the console at it so the demo goes through the real SSH path:
a throwaway host key pinned in a known_hosts file, a throwaway client key that is the
only key accepted, and an ssh_config naming both, so the normal SshTarget connects to
it like to any host. Each exec request runs its command string with `bash -c` as a real
subprocess in a new process group; stdin, stdout and stderr are piped both ways as bytes
with flow control, the exit status (or signal) is returned, and the process group is
killed when the channel closes.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
from pathlib import Path

import asyncssh

from console.config import TargetConfig
from console.remote.target import end_process_group

HOST = "127.0.0.1"
ALIAS = "pulse-demo"
CHUNK = 1 << 16


def pinned_ssh_config(alias: str, host: str, port: int, user: str, key: Path, known_hosts: Path) -> str:
    """An ssh_config entry for a throwaway server: its one key, its pinned host key, no prompts."""
    return (
        f"Host {alias}\n"
        f"  HostName {host}\n"
        f"  Port {port}\n"
        f"  User {user}\n"
        f"  IdentityFile {key}\n"
        f"  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known_hosts}\n"
        f"  StrictHostKeyChecking yes\n"
        f"  BatchMode yes\n"
    )


class DemoSshServer:
    """An asyncssh server on 127.0.0.1 (random port) with throwaway keys written under `dir`.

    `env` is the environment of every command it runs (PATH with the demo's stand-ins first).
    Use as `async with DemoSshServer(dir, env) as server:` or `await start()` / `await close()`.
    """

    def __init__(self, dir: Path, env: dict[str, str] | None = None) -> None:
        self.dir = Path(dir)
        self.env = dict(os.environ if env is None else env)
        self.user = getpass.getuser()
        self.host = HOST
        self.alias = ALIAS
        self.port = 0
        self.host_key_path = self.dir / "ssh_host_ed25519_key"
        self.client_key = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.ssh_config = self.dir / "ssh_config"
        self._listener: asyncssh.SSHAcceptor | None = None
        self._children: set[asyncio.subprocess.Process] = set()

    async def start(self) -> None:
        """Generate the keys, listen on 127.0.0.1 and write known_hosts and ssh_config."""
        host_key = asyncssh.generate_private_key("ssh-ed25519", comment="pulse-demo-host")
        client_key = asyncssh.generate_private_key("ssh-ed25519", comment="pulse-demo-client")
        host_key.write_private_key(str(self.host_key_path))
        client_key.write_private_key(str(self.client_key))
        client_key.write_public_key(f"{self.client_key}.pub")
        os.chmod(self.client_key, 0o600)
        authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())
        self._listener = await asyncssh.listen(
            HOST,
            0,
            server_host_keys=[host_key],
            authorized_client_keys=authorized,
            process_factory=self._serve,
            encoding=None,
            line_editor=False,
            allow_pty=False,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            gss_host=None,
            keepalive_interval=0,
        )
        self.port = self._listener.get_port()
        public = host_key.export_public_key().decode().split()
        line = f"{public[0]} {public[1]}"
        self.known_hosts.write_text(f"[{HOST}]:{self.port} {line}\n[{ALIAS}]:{self.port} {line}\n")
        self.ssh_config.write_text(pinned_ssh_config(ALIAS, HOST, self.port, self.user, self.client_key, self.known_hosts))

    async def close(self) -> None:
        """Stop listening and kill the process group of every command still running."""
        if self._listener is not None:
            self._listener.close()
            await self._listener.wait_closed()
            self._listener = None
        for child in list(self._children):
            end_process_group(child)
            await child.wait()

    async def __aenter__(self) -> DemoSshServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def target_config(self, **overrides) -> TargetConfig:
        """A TargetConfig that reaches this server through its ssh_config alias and pinned host key."""
        fields = {"host": ALIAS, "ssh_config": str(self.ssh_config), "known_hosts": str(self.known_hosts)}
        return TargetConfig(**{**fields, **overrides})

    def child_pids(self) -> list[int]:
        """PIDs of the commands running now (each leads its own process group)."""
        return [child.pid for child in self._children]

    async def _serve(self, process: asyncssh.SSHServerProcess) -> None:
        command = process.command
        if command is None:
            process.stderr.write(b"pulse demo server: only exec requests are served (give a command)\n")
            process.exit(1)
            return
        starting = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                "bash",
                "-c",
                command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                cwd=self.env.get("HOME", "/"),
                start_new_session=True,
            )
        )
        try:
            # Shielded: a command that started must be known, so that it can be killed.
            child = await asyncio.shield(starting)
        except OSError as exc:
            process.stderr.write(f"pulse demo server: cannot start bash: {exc}\n".encode())
            process.exit(127)
            return
        except asyncio.CancelledError:
            child = await starting
            end_process_group(child)
            await child.wait()
            raise
        self._children.add(child)
        feeding = asyncio.ensure_future(_feed_stdin(process, child))
        output = asyncio.ensure_future(
            asyncio.gather(_copy(child.stdout, process.stdout), _copy(child.stderr, process.stderr))
        )
        finished = asyncio.ensure_future(_finish(child, output))
        hung_up = asyncio.ensure_future(process.wait_closed())
        try:
            if self._listener is None:  # closed while this command was starting
                end_process_group(child)
            await asyncio.wait({finished, hung_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not finished.done():
                end_process_group(child)
                await child.wait()
            for task in (feeding, output, finished, hung_up):
                task.cancel()
            await asyncio.gather(feeding, output, finished, hung_up, return_exceptions=True)
            self._children.discard(child)
        if not process.is_closing():
            status = child.returncode
            if status is not None and status < 0:
                process.exit_with_signal(signal.Signals(-status).name.removeprefix("SIG"))
            else:
                process.exit(status if status is not None else 255)


async def _feed_stdin(process: asyncssh.SSHServerProcess, child: asyncio.subprocess.Process) -> None:
    assert child.stdin is not None
    try:
        while data := await process.stdin.read(CHUNK):
            child.stdin.write(data)
            await child.stdin.drain()
    except (BrokenPipeError, ConnectionResetError, asyncssh.Error):
        return
    finally:
        if not child.stdin.is_closing():
            child.stdin.close()


async def _copy(reader: asyncio.StreamReader | None, writer: asyncssh.SSHWriter) -> None:
    assert reader is not None
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (BrokenPipeError, ConnectionResetError, asyncssh.Error):
        return


async def _finish(child: asyncio.subprocess.Process, output: asyncio.Future) -> None:
    """The command has ended once it exited and its output pipes reached EOF (as with sshd)."""
    await child.wait()
    await output



