"""Each safety case runs as PID 1 of its own PID + mount namespace (`unshare --pid --fork --mount-proc`).

`in_namespace(scene, **kwargs)` runs `scene(**kwargs)`, a module-level function of a tests
module, as the namespace's init: every process it starts, and every process Pulse signals
there, lives inside, and all of them die with it. The scene returns a JSON-able dict of what
it saw (exit codes, output, which PIDs are alive, the audit log); the test asserts on it.
`Scene` is what a scene uses: real processes, the real `pulse` CLI, the audit log.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from console.actions.audit import AuditLog
from tests.test_restart import _pids_with, alive, wait_for

REPO = Path(__file__).resolve().parents[2]
PROCS = REPO / "tests" / "procs"
HEALTHY = PROCS / "healthy.py"
IGNORE_SIGTERM = PROCS / "ignore_sigterm.py"
#: `pulse` with the restart's waits shortened (see bin/pulse).
PULSE = [sys.executable, str(Path(__file__).resolve().parent / "bin" / "pulse")]
_RESULT_MARK = "@@scene-result "
SCENE_LIMIT_S = 60


def in_namespace(scene: Callable[..., dict], **kwargs) -> dict:
    """`scene(**kwargs)` run as PID 1 of a fresh PID + mount namespace; the dict it returned."""
    code = (
        "import json, sys\n"
        f"from {scene.__module__} import {scene.__name__} as scene\n"
        f"print({_RESULT_MARK!r} + json.dumps(scene(**json.loads(sys.argv[1]))), flush=True)\n"
    )
    result = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c", code, json.dumps(kwargs)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SCENE_LIMIT_S,
    )
    for line in result.stdout.splitlines():
        if line.startswith(_RESULT_MARK):
            return json.loads(line[len(_RESULT_MARK):])
    raise AssertionError(f"the scene {scene.__name__} gave no result (exit {result.returncode}):\n{result.stderr[-4000:]}")


def pids_with(tag: str) -> list[int]:
    """Live Python processes whose argv holds `tag` as a word (the run and its copies, not shells)."""
    return sorted(pid for pid in _pids_with(tag) if alive(pid))


class Scene:
    """A scene's world: a folder (also $HOME, so the audit log is its own) and the processes in it."""

    def __init__(self, folder: str, tag: str = "train_pulse_safety") -> None:
        self.folder = Path(folder)
        self.tag = tag
        self.pidfile = self.folder / "run.pid"
        self.audit_path = self.folder / ".local" / "state" / "pulse" / "audit.jsonl"
        # Pulse run in the scene itself (not only the CLI it starts) keeps its audit log here too.
        os.environ["HOME"] = str(self.folder)

    def start(self, argv: list[str], **popen) -> subprocess.Popen:
        popen.setdefault("stdin", subprocess.DEVNULL)
        popen.setdefault("stdout", subprocess.DEVNULL)
        popen.setdefault("start_new_session", True)
        return subprocess.Popen(argv, **popen)

    @property
    def old_log(self) -> Path:
        """The log the run a scene starts writes (it matches the restart's `--log` pattern)."""
        return self.folder / f"{self.tag}_old.log"

    def start_run(self, program: Path = HEALTHY, **popen) -> subprocess.Popen:
        """The run: `program --tag TAG`, its output into a log, as a launch would start it."""
        with open(self.old_log, "ab") as log:
            run = self.start([sys.executable, "-u", str(program), "--tag", self.tag, "--interval", "0.05"],
                             stdout=log, **popen)
        wait_for(lambda: self.old_log.stat().st_size, "the run to start")
        return run

    def flags(self, **override: str) -> list[str]:
        """The restart's flags: the run's launch, match, log and pidfile (override or drop one with None)."""
        flags = {
            "--launch": f"{sys.executable} -u {HEALTHY} --tag {self.tag} --interval 0.05",
            "--match": self.tag,
            "--log": str(self.folder / f"{self.tag}_{{started}}.log"),
            "--pidfile": str(self.pidfile),
            **{f"--{name.replace('_', '-')}": value for name, value in override.items()},
        }
        return [word for name, value in flags.items() if value is not None for word in (name, value)]

    def pulse_process(self, *argv: str, shell: str | None = None, **popen) -> subprocess.Popen:
        """`pulse ARGV` started (output piped); with `shell`, inside `bash -c SHELL`, where `{pulse}`
        in it is that command and `{pidfile}` the scene's pidfile."""
        command = [*PULSE, *argv]
        if shell is not None:
            command = ["bash", "-c", shell.format(pulse=shlex.join(command), pidfile=shlex.quote(str(self.pidfile)))]
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
        popen.setdefault("text", True)
        popen.setdefault("start_new_session", False)
        env = {**os.environ, "HOME": str(self.folder), "PYTHONPATH": str(REPO)}
        return self.start(command, env=env, cwd=REPO, **popen)

    def pulse(self, *argv: str, shell: str | None = None, **popen) -> dict:
        """Run `pulse ARGV` (see pulse_process) to its end: exit code, stdout and stderr."""
        process = self.pulse_process(*argv, shell=shell, **popen)
        out, err = process.communicate(timeout=SCENE_LIMIT_S - 10)
        return {"rc": process.returncode, "out": out, "err": err, "pid": process.pid}

    def audit(self) -> list[dict]:
        """Every audit record, "started" ones included."""
        return AuditLog(self.audit_path).records()

    def new_logs(self) -> list[str]:
        return sorted(p.name for p in self.folder.glob(f"{self.tag}_*.log") if p != self.old_log)


def pulse_beside_a_run(folder: str, argv: list[str], run: list[str] | None = None) -> dict:
    """A scene: `run` started (when given), then `pulse ARGV` to its end; its exit code and output,
    and whether the run outlived it."""
    scene = Scene(folder)
    process = scene.start(run) if run else None
    seen = scene.pulse(*argv)
    seen["run_pid"] = process.pid if process else None
    seen["run_alive"] = process is not None and process.poll() is None
    return seen
