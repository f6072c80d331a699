"""A Target reached through another: each command becomes one Slurm job step (`srun --overlap`).

For a node of a Slurm job when SSH to compute nodes is not allowed: the login node's target
carries every command, and Slurm's own command line (built by console/fleet/slurm.py) puts it
inside the job's allocation, with no new resources.
"""

from __future__ import annotations

from collections.abc import Callable

from console.model import Container
from console.remote.shell import command_line, script_argv
from console.remote.target import Channel, Target


class SrunTarget(Target):
    """A node of a Slurm job reached through `srun --overlap` on the control target (the login node).

    `step` turns a command line into the bash line that runs it on the node as a job step.
    """

    def __init__(self, control: Target, step: Callable[[str], str], label: str, container: Container | None) -> None:
        super().__init__(container, control.python)
        self.control = control
        self.step = step
        self.label = label
        control.on_state(self._set_state)

    async def open(self, script: str, *, login: bool = True) -> Channel:
        inner = command_line(script_argv(script, self.container, login=login))
        return await self.control.open(self.step(inner), login=False)
