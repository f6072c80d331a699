"""The world the bench measures in: two real sshd on 127.0.0.1 and the demo's simulated run.

Both servers run the sessions with a throwaway HOME (root's own dotfiles are never read or
touched): the *clean* one has empty dotfiles; the *slow* one has a `.bashrc` that, like a
pyenv/conda init, starts a Python that imports json and asyncio and spends ~100 ms of CPU,
and a `.profile` that sources `.bashrc` as Debian's does. The run is the demo's trainer (a
real process writing a real log) and the demo's stand-in nvidia-smi for eight H200s.
Everything is stopped by PID and the folder removed in `close()`.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from console.config import Config, RunConfig, StallConfig, TargetConfig
from console.demo.run import DemoRun
from console.observe import smi
from tests.sshd import SESSION_PATH, SshServer, start_sshd

#: CPU a slow login init spends (pyenv/conda init measured ≈ 100 ms on this kind of machine).
SLOW_INIT_CPU_S = 0.1
SLOW_INIT = (
    "# pulse bench: a shell init as slow as pyenv/conda init.\n"
    "/usr/bin/python3 -c 'import json, asyncio, time\n"
    f"while time.process_time() < {SLOW_INIT_CPU_S}: pass'\n"
)
REPO_ROOT = Path(__file__).resolve().parents[2]
PY_SPY = Path(sys.executable).with_name("py-spy")
#: The two-rank hang `d` is measured on: a torchrun stand-in whose rank 1 never reaches the all-reduce.
TWO_RANK_HANG = (REPO_ROOT / "tests" / "procs" / "torchrun", REPO_ROOT / "tests" / "procs" / "straggler_rank.py")
#: A run that writes a step line every second, then stops: how soon the header stops calling it healthy.
STOPPING_RUN = REPO_ROOT / "tests" / "procs" / "healthy.py"


class World:
    """Servers, homes and the simulated run for one bench; `close()` stops all of it."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pulse-bench-"))
        os.chmod(self.dir, 0o755)
        self.servers: dict[str, SshServer] = {}
        self.demo: DemoRun | None = None
        self.demo_config: Config | None = None
        self._started: list[subprocess.Popen] = []

    def start(self) -> None:
        for name, rc in (("clean", ""), ("slow", SLOW_INIT)):
            home = self.dir / f"home-{name}"
            home.mkdir()
            (home / ".bashrc").write_text(rc)
            (home / ".profile").write_text('[ -n "$BASH" ] && [ -f ~/.bashrc ] && . ~/.bashrc\n')
            folder = self.dir / f"sshd-{name}"
            folder.mkdir()
            self.servers[name] = start_sshd(folder, SetEnv=f"PATH={SESSION_PATH} HOME={home}")
        self.demo = DemoRun("healthy", parent_dir=str(self.dir))
        self.demo_config = self.demo.start()
        # A loaded machine can take seconds to start the trainer: measure only once it runs and logs.
        if not wait_for(lambda: self.demo.log.exists() and self.demo.pidfile.exists(), 60, 0.05):
            raise RuntimeError("the demo trainer did not start logging within 60 s")

    def close(self) -> None:
        for process in self._started:
            stop_process(process)
        for server in self.servers.values():
            server.stop()
        if self.demo is not None:
            self.demo.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> World:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- configs -------------------------------------------------------------------

    def target(self, server: str) -> TargetConfig:
        """The demo's target settings (python, stand-in nvidia-smi, py-spy), reached through `server`."""
        assert self.demo_config is not None
        demo = self.demo_config.target
        return self.servers[server].target_config(python=demo.python, nvidia_smi=demo.nvidia_smi, py_spy=demo.py_spy)

    def run_config(self, server: str, *, gpu_source: str | None = None) -> Config:
        """The demo run watched through `server` (GPUs from the stand-in nvidia-smi unless `gpu_source`)."""
        assert self.demo_config is not None
        config = dataclasses.replace(self.demo_config, target=self.target(server))
        if gpu_source is not None:
            config = dataclasses.replace(config, gpus=dataclasses.replace(config.gpus, source=gpu_source))
        return config

    def log_config(
        self, server: str, log: Path, match: str, *, stall_s: float | None = 300.0, gpu_source: str = "nvidia-smi"
    ) -> Config:
        """A run found by `match` writing `log`, watched through `server` (GPUs: the demo's stand-in)."""
        assert self.demo_config is not None
        return Config(
            target=self.target(server),
            run=RunConfig(name="bench", log=str(log), match=match),
            gpus=dataclasses.replace(self.demo_config.gpus, source=gpu_source),
            stall=StallConfig(log_silent_s=stall_s),
            audit_log=str(self.dir / "audit.jsonl"),
            source="scripts/bench",
        )

    def probe(self, *, gpus: bool = True) -> str:
        """The manual poll of the demo run (see `manual_probe`)."""
        assert self.demo_config is not None
        run = self.demo_config.run
        return manual_probe(run.match or "", str(run.log), self.demo_config.target.nvidia_smi if gpus else None)

    def spawn(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start a helper process that `close()` stops by PID if it is still running."""
        process = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self._started.append(process)
        return process



def manual_probe(match: str, log: str, nvidia_smi: str | None = "nvidia-smi") -> str:
    """The manual poll as one shell line: the run's processes, both nvidia-smi queries (none
    when `nvidia_smi` is None), the log's stat: the same reads as one sample of Pulse's agent."""
    parts = [f"ps -eo pid,ppid,stat,etimes,pcpu,rss,nlwp,args | grep -E -e {shlex.quote(match)} | grep -v grep"]
    if nvidia_smi is not None:
        fields = ",".join(smi.GPU_QUERY_FIELDS)
        apps = ",".join(smi.APP_QUERY_FIELDS)
        parts.append(f"{shlex.quote(nvidia_smi)} --query-gpu={fields} --format=csv,noheader,nounits")
        parts.append(f"{shlex.quote(nvidia_smi)} --query-compute-apps={apps} --format=csv,noheader,nounits")
    parts.append(f"stat -c '%s %Y %i' {shlex.quote(log)}")
    return "; ".join(parts)


def config_to_spec(config: Config) -> dict:
    """A Config as JSON-able data for a child process (see `config_from_spec`)."""
    data = dataclasses.asdict(config)
    data["gpus"]["roles"] = {str(k): v for k, v in config.gpus.roles.items()}
    return data


def config_from_spec(data: dict) -> Config:
    """The Config `config_to_spec` described (only the parts the bench sets)."""
    from console.config import GpuConfig, MetricsConfig, WarmupConfig
    from console.model import Container

    target = dict(data["target"])
    if target.get("container"):
        target["container"] = Container(**target["container"])
    gpus = dict(data["gpus"])
    gpus["roles"] = {int(k): v for k, v in gpus["roles"].items()}
    warmup = dict(data["warmup"])
    warmup["gpus"], warmup["seq_lens"] = tuple(warmup["gpus"]), tuple(warmup["seq_lens"])
    metrics = dict(data["metrics"])
    metrics["patterns"] = ()
    return Config(
        target=TargetConfig(**target),
        run=RunConfig(**data["run"]),
        gpus=GpuConfig(**gpus),
        metrics=MetricsConfig(**metrics),
        warmup=WarmupConfig(**warmup),
        stall=StallConfig(**data["stall"]),
        audit_log=data["audit_log"],
        source=data["source"],
    )


def stop_process(process: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM the process group `process` leads, SIGKILL it after `grace_s`, and reap it."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def wait_for(predicate, timeout_s: float, step_s: float = 0.01) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()
