"""The agents' protocol: what they may import, the oldest Python they claim, the hello, strict parsing.

The agents run on the target under whatever Python is there, with only the standard library
(pynvml loaded lazily, when the target has it), each shipped as one program with the console
modules it imports (console.remote.program.program_source). Each announces itself with a hello line; the
console refuses another protocol version in one line, and a field an agent leaves out is an
error it shows, never a silent zero.
"""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.config import Config, GpuConfig, RunConfig
from console.observe import agent, follow, follow_agent, procfs, process_agent, remote_process, sampler
from console.observe.follow import FRAME_FIELDS, FollowProtocolError, LogFollower, check_frame
from console.observe.protocol import ProtocolError, check_hello
from console.observe.sampler import SampleError, parse_sample, sample_once
from console.remote.program import program_source
from console.remote.target import LocalTarget, TargetError
from tests.shipped import shipped
from tests.test_agent import agent_argv, run_agent

MODULES = {"pulse-agent": agent, "pulse-follow": follow_agent, "pulse-process": process_agent}
#: Each agent as it is shipped, one file a program.
AGENTS = {program: shipped(module) for program, module in MODULES.items()}
#: The oldest Python the agents claim to run on (their docstrings say so).
OLDEST_PYTHON = "3.8"
WAIT_S = 60.0


def module_imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(top-level package, imported at module level) for every import in `tree`."""
    inside = {id(node) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for node in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name.split(".")[0], id(node) not in inside) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append(((node.module or "").split(".")[0], id(node) not in inside))
    return out


@pytest.mark.parametrize("program", AGENTS)
def test_an_agent_imports_only_the_standard_library_and_pynvml_lazily(program: str) -> None:
    imports = module_imports(ast.parse(AGENTS[program].read_text()))
    assert imports
    for name, at_module_level in imports:
        if name == "pynvml":
            assert not at_module_level, "pynvml must load lazily: most targets run the agent without it"
        else:
            assert name in sys.stdlib_module_names, f"{program} imports {name}, not in the standard library"


def top_level_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level by def, class or assignment."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_the_agents_that_read_processes_ship_the_one_reader_of_proc_with_them() -> None:
    procfs_text = Path(procfs.__file__).read_text()
    for module in (agent, process_agent):
        text = Path(module.__file__).read_text()
        assert "from console.observe.procfs import" in text
        source = program_source(module)
        compile(source, module.PROGRAM, "exec")  # one __future__ line, at the top
        assert source.count("from __future__ import annotations") == 1
        assert "def parse_stat(" in source and "def read_pidfile(" in source
        assert source.startswith(procfs_text[: procfs_text.index("from __future__")])
        # One program, one namespace: an agent never defines again what procfs defines.
        assert not top_level_names(ast.parse(procfs_text)) & top_level_names(ast.parse(text))
    assert program_source(follow_agent) == Path(follow_agent.__file__).read_text()  # it imports no console module


def test_the_agents_run_on_the_oldest_python_they_claim() -> None:
    """vermin reads the syntax and the standard-library names each agent uses, with their minimum versions."""
    vermin = Path(sys.executable).parent / "vermin"
    result = subprocess.run(
        [str(vermin), f"-t={OLDEST_PYTHON}-", "--violations", "--no-tips", "-p=1", *map(str, AGENTS.values())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for path in AGENTS.values():
        assert f"Python {OLDEST_PYTHON}+" in path.read_text()


# -- the hello -------------------------------------------------------------------------------


def first_line(argv: list[str]) -> dict:
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        return json.loads(process.stdout.readline())
    finally:
        process.stdin.close()
        process.wait(timeout=WAIT_S)


def follow_argv(log: Path) -> list[str]:
    return [sys.executable, str(AGENTS["pulse-follow"]), f"--path={log}", "--offset=0", "--inode=0", "--poll=0.05"]


def test_each_agent_says_hello_first_with_its_python(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("step 1\n")
    this_python = "%d.%d.%d" % sys.version_info[:3]
    for program, protocol, argv in (
        (agent.PROGRAM, agent.PROTOCOL, agent_argv(count=1)),
        (follow_agent.PROGRAM, follow_agent.PROTOCOL, follow_argv(tmp_path / "train.log")),
        (process_agent.PROGRAM, process_agent.PROTOCOL, [sys.executable, str(AGENTS["pulse-process"]), "info", "1"]),
    ):
        hello = check_hello(first_line(argv), program, protocol)
        assert (hello.program, hello.protocol, hello.python, hello.pynvml) == (program, protocol, this_python, None)


def test_another_protocol_version_is_refused_in_one_line() -> None:
    said = first_line(agent_argv(count=1))
    with pytest.raises(ProtocolError) as caught:
        check_hello({**said, "protocol": agent.PROTOCOL + 1}, agent.PROGRAM, agent.PROTOCOL)
    message = str(caught.value)
    assert f"speaks protocol {agent.PROTOCOL + 1}, this console {agent.PROTOCOL}" in message
    assert "\n" not in message


def test_an_agent_without_a_hello_is_refused() -> None:
    (sample,) = run_agent(agent_argv(count=1))
    with pytest.raises(ProtocolError, match="did not start with its hello line"):
        check_hello(sample, agent.PROGRAM, agent.PROTOCOL)


def speaking(source: str, protocol: int) -> str:
    """An agent's source that announces `protocol` instead of its own."""
    line = f"\nPROTOCOL = {agent.PROTOCOL}\n"
    assert source.count(line) == 1
    return source.replace(line, f"\nPROTOCOL = {protocol}\n")


async def test_the_sampler_refuses_an_agent_of_another_version(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sampler, "AGENT_SOURCE", speaking(sampler.AGENT_SOURCE, agent.PROTOCOL + 1))
    config = Config(run=RunConfig(match="no-such-run-anywhere"), gpus=GpuConfig(source="none"))
    with pytest.raises(TargetError) as caught:
        await sample_once(LocalTarget(), config, 0.1)
    assert str(caught.value).startswith(f"local: pulse-agent (Python {sys.version_info[0]}.")
    assert "\n" not in str(caught.value)


async def test_a_process_agent_of_another_version_is_refused_before_it_starts_anything(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(remote_process, "AGENT_SOURCE", speaking(remote_process.AGENT_SOURCE, process_agent.PROTOCOL + 1))
    with pytest.raises(TargetError) as caught:
        await remote_process.read_processes(LocalTarget(), [1])
    assert str(caught.value).startswith(f"local: pulse-process (Python {sys.version_info[0]}.")
    assert "\n" not in str(caught.value)


async def test_the_follower_refuses_an_agent_of_another_version(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(follow, "AGENT_SOURCE", speaking(follow.AGENT_SOURCE, follow_agent.PROTOCOL + 1))
    (tmp_path / "train.log").write_text("step 1\n")
    stopped = asyncio.Event()
    events = []

    def on_event(event) -> None:
        events.append(event)
        if event.data.get("ev") == "disconnected":
            stopped.set()

    follower = LogFollower(LocalTarget(), Config(run=RunConfig(log=str(tmp_path / "train.log"))), lambda lines: None,
                           on_event=on_event)  # fmt: skip
    task = asyncio.ensure_future(follower.run())
    try:
        await asyncio.wait_for(stopped.wait(), WAIT_S)
    finally:
        task.cancel()
    (event,) = [e for e in events if e.data.get("ev") == "disconnected"]
    assert f"speaks protocol {follow_agent.PROTOCOL + 1}, this console {follow_agent.PROTOCOL}" in event.text
    assert follower.path is None  # nothing of the file was read from it


# -- strict parsing --------------------------------------------------------------------------


def test_a_named_option_left_out_is_a_usage_error() -> None:
    argv = [arg for arg in agent_argv(count=1) if not arg.startswith("--log=")]
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 2
    assert "the following arguments are required: --log" in result.stderr


def real_sample(tmp_path: Path) -> dict:
    """A line the agent really sends about a real process (one that spins until its stdin closes):
    the second, where its thread has a CPU rate and is sent."""
    spin = "import select, sys\nwhile not select.select([sys.stdin], [], [], 0)[0]: pass"
    run = subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.PIPE)
    try:
        pidfile = tmp_path / "run.pid"
        pidfile.write_text(f"{run.pid}\n")
        _, line = run_agent(agent_argv(count=2, pidfile=str(pidfile), log=str(tmp_path / "x.log")))
    finally:
        run.stdin.close()
        run.wait(timeout=WAIT_S)
    return line


def without(record: dict, key: str) -> dict:
    return {k: v for k, v in record.items() if k != key}


def test_every_field_of_a_real_sample_is_required(tmp_path: Path) -> None:
    line = real_sample(tmp_path)
    parse_sample(line)
    (process,) = line["processes"]
    thread = process["thread_cpu"][0]
    cases = [(without(line, key), f"the line has no {key!r}") for key in line]
    cases += [({**line, "processes": [without(process, key)]}, f"a process has no {key!r}") for key in process]
    thread_cases = [{**process, "thread_cpu": [without(thread, key)]} for key in thread]
    cases += [({**line, "processes": [p]}, f"a thread has no {key!r}") for p, key in zip(thread_cases, thread)]
    cases += [({**line, "log": without(line["log"], key)}, f"the log has no {key!r}") for key in line["log"]]
    for broken, message in cases:
        with pytest.raises(SampleError) as caught:
            parse_sample(broken)
        assert str(caught.value) == message


def real_frames(tmp_path: Path) -> list[dict]:
    """The hello, open and data headers the follower really sends for a small log."""
    log = tmp_path / "train.log"
    log.write_text("step 1\nstep 2\n")
    process = subprocess.Popen(follow_argv(log), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        headers = [json.loads(process.stdout.readline()) for _ in range(3)]
    finally:
        process.stdin.close()
        process.wait(timeout=WAIT_S)
    assert [h["ev"] for h in headers] == ["hello", "open", "data"]
    return headers


def test_every_field_of_a_real_frame_is_required(tmp_path: Path) -> None:
    for header in real_frames(tmp_path):
        assert set(FRAME_FIELDS[check_frame(header)]) == set(header) - {"ev"}
        for key in FRAME_FIELDS[header["ev"]]:
            with pytest.raises(FollowProtocolError) as caught:
                check_frame(without(header, key))
            assert str(caught.value) == f"log follower sent a {header['ev']} frame without {key}"


def test_an_unknown_frame_is_refused() -> None:
    with pytest.raises(FollowProtocolError, match="unknown frame 'opened'"):
        check_frame({"ev": "opened", "path": "/x"})
