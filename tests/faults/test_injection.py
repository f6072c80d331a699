"""Config values and user input reach the far side as the literals they were, through every layer.

Property tests (hypothesis) against a real sshd whose sessions find stand-in `docker` and `kubectl`
(tests/faults/bin) that parse their options like the real ones and exec the command after them:
container ids, namespaces and script arguments through `docker exec` / `kubectl exec` and `bash -lc`;
a custom action's {log}; a log path the follower reads inside the "container"; a launch command and a
match pattern through the restart's launch script and the sampling agent. A canary file proves that
nothing was executed that the config did not say.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from console.actions.custom import ActionContext, execute_custom, plan_custom
from console.actions.audit import OutputLine
from console.actions.restart import launch_argv, launch_env
from console.config import Config, CustomAction, RunConfig
from console.observe.follow import LogFollower
from console.observe.remote_process import launch as launch_process
from console.remote.connect import make_target
from console.model import Container
from console.remote.shell import quote
from console.remote.target import Target
from tests.faults.helpers import record_figure, until
from tests.sshd import SESSION_PATH, SshServer, start_sshd
from tests.test_shell import PYTHON, TRICKY, argument_lists, arguments

FAULTS_BIN = Path(__file__).resolve().parent / "bin"
#: Prints the final argv and what the stand-in container tool parsed, as JSON.
PRINT_ALL = (
    "import json, os, sys; print(json.dumps([sys.argv[1:], "
    "{k: v for k, v in os.environ.items() if k.startswith('PULSE_')}]))"
)
HOSTILE_IDS = ["--user=root", "-u", "--as=system:admin", "trainer; touch CANARY", "$(touch CANARY)", "a b", "ünï ✓", "`id`"]
SETTINGS = settings(max_examples=int(os.environ.get("PULSE_FUZZ_EXAMPLES", "10")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ids = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=30)
counted = {"values": 0}


@pytest.fixture(scope="module")
def container_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """An sshd whose sessions find the stand-in docker and kubectl first on their PATH."""
    folder = tmp_path_factory.mktemp("injection-sshd")
    home = folder / "home"
    home.mkdir()
    server = start_sshd(folder, SetEnv=f"PATH={FAULTS_BIN}:{SESSION_PATH} HOME={home}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for the module's hypothesis examples, so one SSH connection serves them all."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()
    record_figure("injection", values_fuzzed=counted["values"], layers="ssh + bash -lc + docker/kubectl exec")


def run_on(loop, target: Target, script: str) -> tuple[list[str], dict]:
    result = loop.run_until_complete(target.run(script, timeout=60))
    assert result.ok, result.stderr
    argv, parsed = json.loads(result.stdout.strip().splitlines()[-1])
    return argv, parsed


def canary_script(canary: Path, value: str) -> str:
    return value.replace("CANARY", str(canary))


@pytest.mark.parametrize("kind", ["docker", "kubectl"])
def test_container_ids_and_arguments_arrive_literally(kind: str, container_sshd: SshServer, loop, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    targets: list[Target] = []

    @given(ids, ids, argument_lists)
    @example("trainer", "ml", TRICKY)
    @SETTINGS
    def check(container_id: str, namespace: str, args: list[str]) -> None:
        container_id = canary_script(canary, container_id)
        container = Container(kind, container_id, namespace if kind == "kubectl" else None)
        target = make_target(container_sshd.target_config(container=container))
        targets.append(target)
        script = " ".join([PYTHON, "-c", quote(PRINT_ALL), *map(quote, args)])
        counted["values"] += 2 + len(args)
        if container_id.startswith("-") or (kind == "kubectl" and namespace.startswith("-")):
            with pytest.raises(ValueError, match="cannot start with '-'"):
                loop.run_until_complete(target.run(script, timeout=60))
            return
        argv, parsed = run_on(loop, target, script)
        assert argv == args
        if kind == "docker":
            assert parsed == {"PULSE_CONTAINER_ID": container_id}
        else:
            assert parsed == {"PULSE_POD": container_id, "PULSE_NAMESPACE": namespace}

    try:
        check()
        for hostile in HOSTILE_IDS:
            check.hypothesis.inner_test(hostile, "ml", ["x"])  # the named attacks, every time
    finally:
        for target in targets:
            loop.run_until_complete(target.close())
    assert not canary.exists(), "a container id was executed"


def test_custom_action_values_arrive_literally_inside_docker(container_sshd: SshServer, loop, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    target = make_target(container_sshd.target_config(container=Container("docker", "trainer")))
    config = Config(audit_log=str(tmp_path / "audit.jsonl"))
    action = CustomAction(name="show", key="s", command=f"{PYTHON} -c {quote(PRINT_ALL)} {{log}} {{host}} {{pids}}", confirm=False)

    async def lines_of(plan) -> list[str]:
        return [e.text for e in [event async for event in execute_custom(target, config, plan)] if isinstance(e, OutputLine)]

    @given(arguments.filter(bool), arguments)
    @example("x; touch CANARY", "$(touch CANARY)")
    @SETTINGS
    def check(log: str, host: str) -> None:
        log, host = canary_script(canary, log), canary_script(canary, host)
        counted["values"] += 2
        plan = plan_custom(action, ActionContext(pids=(41, 42), log=log, host=host))
        (line,) = [text for text in loop.run_until_complete(lines_of(plan)) if text.startswith("[[")]
        argv, parsed = json.loads(line)
        assert argv == [log, host, "41", "42"]
        assert parsed == {"PULSE_CONTAINER_ID": "trainer"}

    try:
        check()
    finally:
        loop.run_until_complete(target.close())
    assert not canary.exists(), "an action value was executed"


@pytest.mark.parametrize("name", ["it's $(touch CANARY) `id`.log", "sp ace;&|<>*.log", "-dash.log", "ünï\t✓.log"])
def test_a_log_path_is_followed_literally_through_kubectl(name: str, container_sshd: SshServer, loop, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    log = tmp_path / name.replace("CANARY", "canary")
    log.write_bytes(b"the line\n")
    target = make_target(container_sshd.target_config(container=Container("kubectl", "pod-0", "ml")))
    received: list[str] = []
    follower = LogFollower(target, Config(run=RunConfig(log=str(log))), lambda lines: received.extend(l.text for l in lines))
    counted["values"] += 1

    async def follow() -> None:
        task = asyncio.create_task(follower.run())
        try:
            await until(lambda: received, f"the line of {log}", timeout=60)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await target.close()

    loop.run_until_complete(follow())
    assert received == ["the line"] and follower.path == str(log)
    assert not canary.exists()


def test_a_launch_command_runs_exactly_as_written_inside_docker(container_sshd: SshServer, loop, tmp_path: Path) -> None:
    target = make_target(container_sshd.target_config(container=Container("docker", "trainer")))
    canary = tmp_path / "canary"

    @given(argument_lists)
    @example(["$(touch CANARY)", "a;b", "`touch CANARY`", "it's"])
    @SETTINGS
    def check(args: list[str]) -> None:
        args = [canary_script(canary, arg) for arg in args if "\n" not in arg and "\r" not in arg]
        out = tmp_path / "launched.json"
        out.unlink(missing_ok=True)
        launch = " ".join([PYTHON, "-c", quote(PRINT_ALL), *map(quote, args)])
        counted["values"] += len(args)
        loop.run_until_complete(launch_process(target, list(launch_argv(launch)), log=str(out), cwd=str(tmp_path),
                                               env=launch_env({"ODD": "v'$(touch CANARY)"}), timeout=60))
        loop.run_until_complete(until(lambda: out.exists() and out.read_text().endswith("\n"), "the launched program's output", 60))
        argv, parsed = json.loads(out.read_text().splitlines()[-1])
        assert argv == args
        assert parsed == {"PULSE_CONTAINER_ID": "trainer"}

    try:
        check()
    finally:
        loop.run_until_complete(target.close())
    assert not canary.exists(), "a launch argument was executed"


@pytest.mark.parametrize("match", ["$(touch CANARY)|it's", "-e `touch CANARY`", "a;b && touch CANARY", "[unclosed"])
def test_a_match_pattern_reaches_the_agent_literally_through_docker(match: str, container_sshd: SshServer, loop, tmp_path: Path) -> None:
    from console.observe.sampler import sample_once

    canary = tmp_path / "canary"
    match = canary_script(canary, match)
    config = Config(target=container_sshd.target_config(container=Container("docker", "trainer")), run=RunConfig(match=match))
    target = make_target(config.target)
    counted["values"] += 1
    try:
        _, sample = loop.run_until_complete(sample_once(target, config, 0.05))
    finally:
        loop.run_until_complete(target.close())
    if match == "[unclosed":
        assert sample.process_error.startswith("the match regex '[unclosed' is invalid")
    else:
        assert sample.process_error is None and sample.processes == ()
    assert not canary.exists(), "a match pattern was executed"
