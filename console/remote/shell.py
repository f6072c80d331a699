"""Pure command building: one script through every layer, quoted once per layer.

The script is run by `bash -lc` (the user's login environment: conda, pyenv, module
paths), inside the container when there is one, and the whole argv is joined into
the single string an SSH exec request carries. Nothing here runs anything.
"""

from __future__ import annotations

import shlex

from console.model import Container

def container_argv(container: Container | None, argv: list[str]) -> list[str]:
    """`argv` as run inside `container` (stdin passed through, as the agent needs)."""
    if container is None:
        return list(argv)
    for what, value in (("container id", container.id), ("namespace", container.namespace or "")):
        # pct, docker and kubectl would read a leading '-' as one of their own options (`--user=root`, `--as=admin`).
        if value.startswith("-"):
            raise ValueError(f"a {container.kind} {what} cannot start with '-': {value[:40]!r}")
    if container.kind == "pct":
        return ["pct", "exec", container.id, "--", *argv]
    if container.kind == "docker":
        return ["docker", "exec", "-i", container.id, *argv]
    if container.kind == "kubectl":
        ns = [f"--namespace={container.namespace}"] if container.namespace else []  # one word: never an option
        return ["kubectl", "exec", "-i", *ns, container.id, "--", *argv]
    raise ValueError(f"unknown container kind {container.kind!r}")


def script_argv(script: str, container: Container | None = None, *, login: bool = True) -> list[str]:
    """The argv that runs a bash `script` in the target's environment."""
    return container_argv(container, ["bash", "-lc" if login else "-c", script])


def _refuse_nul(value: str) -> str:
    # A process argument is a C string: a NUL would silently cut it short on the far side.
    if "\0" in value:
        raise ValueError(f"a command argument cannot contain a NUL character: {value[:40]!r}")
    return value


def command_line(argv: list[str]) -> str:
    """One string that a POSIX shell (sshd runs the user's shell with -c) splits back into `argv`.

    The login shell on the host must be POSIX (bash, dash, zsh); csh and fish quote differently.
    ValueError for an argument with a NUL character, which no process argument can hold.
    """
    return shlex.join(_refuse_nul(arg) for arg in argv)


def quote(value: str) -> str:
    """Quote one value for a bash script (ValueError for a NUL character, as in `command_line`)."""
    return shlex.quote(_refuse_nul(value))
