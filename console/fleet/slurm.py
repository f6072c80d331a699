"""Slurm: what the scheduler says about a job, read through the commands users already run.

`SlurmClient` runs `scontrol`, `squeue`, `scancel`, `sbatch` on a Target (the login node over
SSH, or this machine); `console.fleet.slurm_text` parses what they print.
Pulse never schedules anything itself: it reads the job and asks Slurm to act on it.
"""

from __future__ import annotations

from console.fleet.slurm_text import (
    SlurmError,
    SlurmJob,
    check_job_id,
    clean_field,
    parse_hostnames,
    parse_job,
    parse_sacct_final,
    parse_submitted,
)
from console.observe import agent
from console.remote.shell import quote
from console.remote.target import Target, TargetError

COMMAND_TIMEOUT_S = 20.0


class SlurmClient:
    """Slurm's commands run on `target` (where `scontrol` works: a login node, or this machine)."""

    def __init__(self, target: Target, *, timeout: float = COMMAND_TIMEOUT_S) -> None:
        self.target = target
        self.timeout = timeout

    async def _run(self, script: str, what: str) -> str:
        try:
            result = await self.target.run(script, self.timeout)
        except TargetError as exc:
            raise SlurmError(f"{what}: {exc}") from None
        if result.exit_status == 127:
            raise SlurmError(f"{self.target.label}: {what}: Slurm's commands are not installed there (exit 127)")
        if not result.ok:
            said = (result.stderr or result.stdout).strip().splitlines()
            detail = clean_field(said[-1]) if said else f"exit {result.exit_status}"
            raise SlurmError(f"{self.target.label}: {what} failed: {detail}")
        return result.stdout

    async def job(self, job_id: str) -> SlurmJob:
        """The job as Slurm knows it now; SlurmError when it does not (a wrong ID, or long finished)."""
        word = check_job_id(job_id)
        try:
            text = await self._run(f"scontrol show job -o {word}", f"scontrol show job {word}")
        except SlurmError as exc:
            if "invalid job id" in str(exc).lower():
                raise SlurmError(
                    f"Slurm does not know job {word} (a wrong ID, or it ended more than MinJobAge ago)"
                ) from None
            raise
        return parse_job(text)

    async def final_state(self, job_id: str) -> tuple[str, str]:
        """(state, exit code) of an ended job from Slurm's accounting (`sacct`); SlurmError when there is none."""
        word = check_job_id(job_id)
        text = await self._run(f"sacct -X -n -P -j {word} -o JobID,State,ExitCode", f"sacct -j {word}")
        found = parse_sacct_final(text, word)
        if found is None:
            raise SlurmError(f"sacct does not list job {word}")
        return found

    async def hostnames(self, nodes: str) -> list[str]:
        """A compact node list (`gpu[01-04]`) as node names, by `scontrol show hostnames`."""
        if not nodes:
            return []
        return parse_hostnames(await self._run(f"scontrol show hostnames {quote(nodes)}", "scontrol show hostnames"))

    async def cancel(self, job_id: str) -> None:
        """`scancel ID`: Slurm signals and ends every step of the job."""
        word = check_job_id(job_id)
        await self._run(f"scancel {word}", f"scancel {word}")

    async def requeue(self, job_id: str) -> None:
        """`scontrol requeue ID`: the batch job ends and goes back to the queue under the same ID."""
        word = check_job_id(job_id)
        await self._run(f"scontrol requeue {word}", f"scontrol requeue {word}")

    async def submit(self, command: str, *, cwd: str | None = None) -> str:
        """Run an `sbatch …` command line (from the config) with `--parsable`; the new job's ID."""
        words = command.split(maxsplit=1)
        if not words or words[0].rsplit("/", 1)[-1] != "sbatch":
            raise SlurmError(f"the resubmit command must start with sbatch, not {command[:40]!r}")
        line = f"{words[0]} --parsable {words[1] if len(words) > 1 else ''}"
        script = f"cd {quote(cwd)} || exit 1\n{line}" if cwd else line
        return parse_submitted(await self._run(script, "sbatch"))

    def srun_script(self, job_id: str, node: str, script: str) -> str:
        """The bash line that runs `script` on `node` inside the job's allocation (no new resources).

        The step's environment carries PULSE_STEP: its processes belong to the job but are never the run.
        """
        word = check_job_id(job_id)
        return (
            f"exec srun --jobid={word} --overlap --nodes=1 --ntasks=1 --nodelist={quote(node)} "
            f"--export=ALL,{agent.PULSE_STEP_VARIABLE}=1 "
            f"--quiet --kill-on-bad-exit=0 bash -c {quote(script)}"
        )
