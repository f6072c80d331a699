"""Any argument survives every quoting layer unchanged, as ONE argv element of the final process.

The final process is a tiny Python program that prints its argv as JSON. It runs through
`bash -lc` here (LocalTarget), through the real sshd (SshTarget), and through the stand-in
`pct exec` into a PID namespace over sshd. NUL characters are left out of the generated
arguments: a process argument is a C string and cannot hold one (command_line refuses it).
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from console.config import TargetConfig
from console.remote.connect import make_target
from console.model import Container
from console.remote.shell import command_line, container_argv, quote, script_argv
from console.remote.target import Target

PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
#: The system interpreter by path: a version manager's shim on the login PATH costs ~0.2 s a run.
PYTHON = "/usr/bin/python3"

#: Any text a process argument can hold: everything but NUL and lone surrogates (not UTF-8).
arguments = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=60)
argument_lists = st.lists(arguments, min_size=1, max_size=4)

TRICKY = [
    "it's",
    'say "hi"',
    "$HOME ${PATH} $(id) `id`",
    "line one\nline two\n",
    "-c",
    "--help",
    "-",
    "ünïcødé ✓ 日本語 🚀",
    "back\\slash \\' \\\"",
    "",
    "a;b&&c||d|e>f<g",
    "*?[abc]~",
    "\t \r\x1b[31m",
    "!!",
]

SSH_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def argv_script(args: list[str]) -> str:
    """A bash script whose last command is the argv printer with `args`."""
    return " ".join([PYTHON, "-c", quote(PRINT_ARGV), *map(quote, args)])


def final_argv(stdout: str) -> list[str]:
    # The login shell's start-up files may print; the printer's JSON is the last line.
    return json.loads(stdout.strip().splitlines()[-1])


@contextmanager
def target_on_loop(cfg: TargetConfig) -> Iterator[tuple[Target, asyncio.AbstractEventLoop]]:
    """A target and one event loop kept across hypothesis examples, so one SSH connection serves them all."""
    loop = asyncio.new_event_loop()
    target = make_target(cfg)
    try:
        yield target, loop
    finally:
        loop.run_until_complete(target.close())
        loop.close()


def roundtrip(target: Target, loop: asyncio.AbstractEventLoop, args: list[str]) -> list[str]:
    result = loop.run_until_complete(target.run(argv_script(args), timeout=60))
    assert result.ok, result.stderr
    return final_argv(result.stdout)


@given(argument_lists)
@settings(max_examples=300)
def test_command_line_splits_back_into_the_same_argv(args: list[str]) -> None:
    """Pure layer check: what sshd's `sh -c` would split is exactly the argv we built, pct layer included."""
    argv = script_argv(argv_script(args), Container("pct", "200"))
    assert shlex.split(command_line(argv)) == argv


def test_nul_is_refused_with_a_clear_error() -> None:
    """A NUL cannot be a process argument: refuse it instead of letting the far side cut it short."""
    with pytest.raises(ValueError, match="NUL"):
        command_line(["echo", "a\0b"])
    with pytest.raises(ValueError, match="NUL"):
        quote("a\0b")


def test_container_layers_put_the_command_last() -> None:
    """Each container kind passes the argv through untouched, after its own options."""
    argv = ["bash", "-lc", "echo hi"]
    assert container_argv(None, argv) == argv
    assert container_argv(Container("pct", "200"), argv) == ["pct", "exec", "200", "--", *argv]
    assert container_argv(Container("docker", "trainer"), argv) == ["docker", "exec", "-i", "trainer", *argv]
    assert container_argv(Container("kubectl", "pod-0", "ml"), argv) == [
        "kubectl", "exec", "-i", "--namespace=ml", "pod-0", "--", *argv,
    ]


def test_local_bash_lc_keeps_every_argument() -> None:
    """Locally through LocalTarget's `bash -lc`: any argument list arrives unchanged."""
    with target_on_loop(TargetConfig()) as (target, loop):

        @given(argument_lists)
        @example(TRICKY)
        @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        def check(args: list[str]) -> None:
            assert roundtrip(target, loop, args) == args

        check()


def test_ssh_keeps_every_argument(sshd) -> None:
    """Through the real sshd: the user's shell splits the command line, then `bash -lc` runs the script."""
    with target_on_loop(sshd.target_config()) as (target, loop):

        @given(argument_lists)
        @example(TRICKY)
        @SSH_SETTINGS
        def check(args: list[str]) -> None:
            assert roundtrip(target, loop, args) == args

        check()


def test_pct_over_ssh_keeps_every_argument(sshd, pid_namespace) -> None:
    """Through sshd and `pct exec ID --` into a PID namespace: one more layer, still unchanged."""
    with target_on_loop(sshd.target_config(container=pid_namespace.container)) as (target, loop):
        init = loop.run_until_complete(target.run("tr '\\0' ' ' < /proc/1/cmdline", timeout=60))
        assert init.ok, init.stderr
        assert init.stdout.split() == ["sleep", "infinity"]  # PID 1 is the namespace's init: we ran inside

        @given(argument_lists)
        @example(TRICKY)
        @SSH_SETTINGS
        def check(args: list[str]) -> None:
            assert roundtrip(target, loop, args) == args

        check()
