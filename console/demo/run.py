"""`pulse demo`: the whole console on a simulated run, through a real in-process SSH server.

`DemoRun` builds the demo's world in a temp dir and takes it all down again: a stand-in
`nvidia-smi`, the simulated trainer (a real process), and an SSH server on 127.0.0.1 in a
thread of its own. `run_demo` points the normal console at that server and, when the
operator quits, stops everything it started by PID and removes the temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from console.config import Config, GpuConfig, MetricsConfig, RunConfig, StallConfig, WarmupConfig
from console.demo.machine import DRAFTER_GPUS, TARGET_GPUS
from console.demo.server import DemoSshServer
from console.demo.trainer import BASELINE_TOKENS_PER_S

#: The folder that holds the `console` package: the demo's helpers run with `-m` from here.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: Short enough for the hang and buffered scenarios to show within the demo.
DEMO_STALL_S = 20.0
RECORD_NAME = "demo.json"
SERVER_START_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


class DemoRun:
    """The demo's processes and files for one scenario, between `start()` and `stop()`."""

    def __init__(
        self, scenario: str = "healthy", *, parent_dir: str | None = None, trainer_args: Sequence[str] = ()
    ) -> None:
        """`trainer_args` go to the trainer after the usual ones (e.g. `--step-s 0.05` to fast-forward)."""
        self.scenario = scenario
        self.trainer_args = tuple(trainer_args)
        self.dir = Path(tempfile.mkdtemp(prefix="pulse-demo-", dir=parent_dir))
        self.bin = self.dir / "bin"
        self.log = self.dir / "train.log"
        self.state_file = self.dir / "gpus.json"
        self.pidfile = self.dir / "train.pid"
        self.nvidia_smi = self.bin / "nvidia-smi"
        self.trainer: subprocess.Popen | None = None
        self.server: DemoSshServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- start -------------------------------------------------------------------

    def start(self) -> Config:
        """Start the trainer and the SSH server; the Config that watches them through SSH."""
        self._write_nvidia_smi()
        self.trainer = self._start_trainer()
        self._start_server()
        self._write_record()
        return self.config()

    def trainer_argv(self, scenario: str) -> list[str]:
        """How the run is launched; without `-u` when the scenario is a block-buffered run."""
        unbuffered = [] if scenario == "buffered" else ["-u"]
        return [
            sys.executable,
            *unbuffered,
            "-m",
            "console.demo.trainer",
            "--scenario",
            scenario,
            "--log",
            str(self.log),
            "--state",
            str(self.state_file),
            "--pidfile",
            str(self.pidfile),
            *self.trainer_args,
        ]

    def config(self) -> Config:
        """The run's config as an operator would write it for this machine."""
        assert self.server is not None
        python = sys.executable
        py_spy = Path(python).with_name("py-spy")
        in_root = f"cd {shlex.quote(str(PACKAGE_ROOT))} && "
        return Config(
            target=self.server.target_config(
                python=python,
                nvidia_smi=str(self.nvidia_smi),
                py_spy=str(py_spy) if py_spy.exists() else "py-spy",
            ),
            run=RunConfig(
                name=f"demo-{self.scenario}",
                # A relaunch is the fixed run: healthy.
                launch=shlex.join(self.trainer_argv("healthy")),
                cwd=str(PACKAGE_ROOT),
                log=str(self.log),
                # This demo's trainers only: they write into its own folder (another demo's are not its run).
                match=rf"-m console\.demo\.trainer\b.* --log {re.escape(str(self.log))}(?: |$)",
                pidfile=str(self.pidfile),
                env={"PYTHONPATH": str(PACKAGE_ROOT)},
                grace_s=5.0,
            ),
            gpus=GpuConfig(
                roles={**{i: "target" for i in TARGET_GPUS}, **{i: "drafter" for i in DRAFTER_GPUS}},
                source="nvidia-smi",
            ),
            metrics=MetricsConfig(baseline_tokens_per_s=BASELINE_TOKENS_PER_S),
            warmup=WarmupConfig(
                command=in_root + f"{shlex.quote(python)} -m console.demo.warmup --gpu {{gpu}} --seq-len {{seq_len}}",
                gpus=TARGET_GPUS,
                seq_lens=(770, 1216, 1728, 2432),
                triton_cache_dir=str(self.dir / "triton-cache"),
                step_timeout_s=60.0,
            ),
            stall=StallConfig(log_silent_s=DEMO_STALL_S),
            audit_log=str(self.dir / "audit.jsonl"),
            source="pulse demo",
        )

    def _write_nvidia_smi(self) -> None:
        self.bin.mkdir()
        self.nvidia_smi.write_text(
            "#!/bin/sh\n"
            "# pulse demo: a stand-in nvidia-smi for the simulated GPUs.\n"
            f"PYTHONPATH={shlex.quote(str(PACKAGE_ROOT))} exec {shlex.quote(sys.executable)} -S "
            f"-m console.demo.nvidia_smi --state {shlex.quote(str(self.state_file))} \"$@\"\n"
        )
        self.nvidia_smi.chmod(0o755)

    def _start_trainer(self) -> subprocess.Popen:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
        env["PYTHONPATH"] = str(PACKAGE_ROOT)
        trainer = subprocess.Popen(
            self.trainer_argv(self.scenario),
            cwd=PACKAGE_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # the terminal's signals are the console's, not the run's
            preexec_fn=_die_with_parent,
        )
        # Reap it when it ends, as a launching shell would: an exited run must not linger as a zombie.
        threading.Thread(target=trainer.wait, name="pulse-demo-reaper", daemon=True).start()
        return trainer

    def _start_server(self) -> None:
        env = dict(os.environ)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}"
        self.server = DemoSshServer(self.dir / "ssh", env)
        self.server.dir.mkdir()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pulse-demo-sshd", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(SERVER_START_TIMEOUT_S)

    def _write_record(self) -> None:
        """What is running, for whoever must check the demo left nothing behind (the smoke test)."""
        assert self.trainer is not None
        record = {"pid": os.getpid(), "trainer_pid": self.trainer.pid, "dir": str(self.dir), "scenario": self.scenario}
        (self.dir / RECORD_NAME).write_text(json.dumps(record))

    # -- stop --------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the trainer (and any relaunch of it), the server and its commands; remove the temp dir."""
        if self.trainer is not None:
            _kill_group(self.trainer.pid)
            self.trainer.wait()
        relaunched = self._relaunched_pid()
        if relaunched is not None:
            try:
                os.kill(relaunched, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.server is not None and self._loop is not None:
            asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(SERVER_START_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            assert self._thread is not None
            self._thread.join()
            self._loop.close()
            self.server = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def _relaunched_pid(self) -> int | None:
        """The PID in the pidfile when it is a trainer of this demo (a restart launched it)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
        except (OSError, ValueError):
            return None
        return pid if str(self.dir) in cmdline and "console.demo.trainer" in cmdline else None

    def __enter__(self) -> DemoRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the trainer before exec: the kernel kills it if the demo dies without cleaning up."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads (the demo started it with a session of its own)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_demo(args: argparse.Namespace) -> int:
    """`pulse demo [--scenario S] [--theme T] [--read-only]`: run the console on a simulated run."""
    from console.ui.start import run_console

    demo = DemoRun(getattr(args, "scenario", "healthy"))
    # A closed terminal (SIGHUP) or a plain `kill` must still take the demo's processes and files down:
    # while the console runs, it ends as `q` does (console/ui/start.py SignalEnding); before and after, this.
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            config = demo.start()
        except (OSError, TimeoutError) as exc:
            print(f"pulse demo: could not start the simulated run: {exc}", file=sys.stderr)
            return 1
        name_demo_journal(config)
        return run_console(config, args)
    finally:
        demo.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def name_demo_journal(config: Config) -> None:
    """Write where this demo's journal is (its own: its log is in its own folder), for `pulse journal --demo`."""
    from console.journal.store import journal_path, last_demo_pointer

    pointer = last_demo_pointer()
    try:
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.write_text(f"{journal_path(config)}\n")
    except OSError:
        pass  # the console says why its journal cannot open; the demo runs without it


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
