"""A `pulse` command run inside its own PID namespace, beside a run process of its own.

`pulse_isolated(argv, run=…)` starts `unshare --pid --fork --mount-proc` with this module as the
namespace's PID 1: it starts the run (when given), runs `python -m console.cli ARGV`, reports
whether the run is still alive, and exits, which ends everything in the namespace. Whatever
the command does wrong, it can only touch processes the test started inside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEALTHY = REPO / "tests" / "procs" / "healthy.py"
#: Bounds a command that hangs (the failure the tests look for), never a speed assertion.
COMMAND_TIMEOUT_S = 120


@dataclass(frozen=True)
class Isolated:
    returncode: int
    stdout: str
    stderr: str
    run_pid: int | None
    """The run's PID inside the namespace (None when no run was started)."""
    run_alive: bool


def pulse_isolated(
    argv: list[str], *, run: list[str] | None = None, home: Path, env: dict[str, str] | None = None
) -> Isolated:
    """Run `pulse ARGV` in a fresh PID namespace (HOME=home), with `run` started there first."""
    spec = json.dumps({"argv": argv, "run": run})
    env = {**(env or os.environ), "HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "tests.safety.isolated", spec],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S + 30, stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"namespace driver failed ({done.returncode}): {done.stderr[-800:]}")
    report = json.loads(done.stdout)
    return Isolated(**report)


def _inside(spec: dict) -> dict:
    """PID 1 of the namespace: start the run, run pulse, say whether the run survived."""
    run = None
    if spec["run"]:
        run = subprocess.Popen(spec["run"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        pulse = subprocess.run([sys.executable, "-m", "console.cli", *spec["argv"]], capture_output=True, text=True,
                               timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
        rc, out, err = pulse.returncode, pulse.stdout, pulse.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, str(exc.stdout or ""), f"timed out after {COMMAND_TIMEOUT_S} s"
    return {"returncode": rc, "stdout": out, "stderr": err, "run_pid": run.pid if run else None,
            "run_alive": run is not None and run.poll() is None}


if __name__ == "__main__":
    print(json.dumps(_inside(json.loads(sys.argv[1]))))
