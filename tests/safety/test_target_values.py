"""Issue 30 U1, U4 and the rough crashes: every value that names a target or a path is checked before anything runs.

`pulse restart --host "$GPU_BOX"` with the variable unset restarted the local run; `--pct ""` was
dropped, so the box itself was acted on; `log = "-train_{started}.log"` stopped the run and then
failed its launch; `--docker=--privileged` crashed. Now an empty, blank or dash-led value (and a
control character, and whitespace in a name) is one line, exit 2, naming the flag or `file:line: key`.

Each group of cases is one scene, PID 1 of its own PID namespace, beside a live run that the
wrong fallback would have stopped (restart), dumped, or warmed up beside: after every case the
run is the same live process, nothing was launched or warmed up, and the audit log is empty.
The values that do reach a helper program are passed as `--opt=VALUE` or after `--`: the last
tests run the real process agent and the real py-spy on such values.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.model import Container
from console.observe.pyspy_run import dump
from console.observe.remote_process import launch, probe
from console.remote.shell import container_argv
from console.remote.target import LocalTarget
from tests.safety.namespace import HEALTHY, Scene, in_namespace
from tests.test_restart import wait_for

#: A case that opened the console or started watching instead of refusing is ended after this long.
CASE_LIMIT_S = 10

EMPTY = "is empty (an unset variable?); give a value or leave it out"
BLANK = "is only whitespace (an unset variable?); give a value or leave it out"


def dash(value: str, kind: str = "name") -> str:
    fix = f"for a file or folder of that name write ./{value}" if kind == "path" else "give the name without it"
    return f"starts with '-' ({value!r}), which a program would read as an option; {fix}"


def control(value: str) -> str:
    return f"holds a control character ({value!r}); give the value without it"


def spaced(value: str) -> str:
    return f"holds whitespace ({value!r}), which no host, container or job name has; give the name alone"


# -- the scene ----------------------------------------------------------------------------------


def refusals_beside_a_run(folder: str, cases: dict[str, list[str]]) -> dict:
    """A scene: the run started, then `pulse ARGV` of each case to its end (or CASE_LIMIT_S); what each said,
    and after each whether the run is the same live process, what was launched or warmed up, what was audited."""
    scene = Scene(folder)
    run = scene.start_run()
    marks = Path(folder) / "warm.marks"
    seen = {}
    for name, argv in cases.items():
        process = scene.pulse_process(*argv)
        try:
            out, err = process.communicate(timeout=CASE_LIMIT_S)
            rc = process.returncode
        except subprocess.TimeoutExpired:  # it opened, or started acting: the case failed
            process.kill()
            out, err = process.communicate()
            rc = None
        seen[name] = {"rc": rc, "out": out, "err": err, "run_alive": run.poll() is None,
                      "new_logs": scene.new_logs(), "warmed_up": marks.exists(), "audit": scene.audit()}
    return seen


TAG = "train_pulse_safety"  # the scene's run (Scene's default tag)


def run_config(folder: Path) -> dict[str, dict[str, str]]:
    """The run's config, section → key → TOML value: the scene's run, its log and pidfile, and a warmup."""
    return {
        "target": {},
        "run": {
            "launch": json.dumps(f"{sys.executable} -u {HEALTHY} --tag {TAG} --interval 0.05"),
            "match": json.dumps(TAG),
            "log": json.dumps(str(folder / f"{TAG}_{{started}}.log")),
            "pidfile": json.dumps(str(folder / "run.pid")),
        },
        "warmup": {"command": json.dumps(f"echo warm {{gpu}} {{seq_len}} >> {folder / 'warm.marks'}"),
                   "gpus": "[0]", "seq_lens": "[128]"},
    }


def write_config(path: Path, sections: dict[str, dict[str, str]]) -> dict[str, int]:
    """Write `sections` as TOML; the line each `section.key` is on."""
    lines, where = [], {}
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        for key, value in keys.items():
            lines.append(f"{key} = {value}")
            where[f"{section}.{key}"] = len(lines)
    path.write_text("\n".join(lines) + "\n")
    return where


def run_cases(folder: Path, cases: dict[str, list[str]]) -> dict:
    """The cases' argv (`{folder}` in a word is the scene's folder) run by one scene; what each saw."""
    argv = {case: [word.replace("{folder}", str(folder)) for word in words] for case, words in cases.items()}
    return in_namespace(refusals_beside_a_run, folder=str(folder), cases=argv)


def assert_refused(seen: dict, line: str) -> None:
    """Exit 2, exactly `line` on stderr, nothing on stdout; the run untouched, nothing launched or audited."""
    assert seen["rc"] == 2, seen
    assert seen["err"] == line + "\n"
    assert seen["out"] == ""
    assert seen["run_alive"], "the run was stopped"
    assert seen["new_logs"] == [] and not seen["warmed_up"]
    assert seen["audit"] == []


# -- U1 and the rough crashes: flags, on the restart that would have acted on the wrong machine ------

NAME_FLAGS = ["--host", "--pct", "--docker", "--kubectl", "--slurm-job"]
PATH_FLAGS = ["--log", "--pidfile", "--known-hosts", "--ssh-config", "--py-spy"]

#: A value that starts with '-' reaches Pulse as `--flag=-x` (`--flag -x` is argparse's "expected one argument").
FLAG_CASES: dict[str, tuple[list[str], str]] = {
    **{f"{flag} {value!r}": ([flag, value], f"{flag}: {expected}")
       for flag in NAME_FLAGS for value, expected in [("", EMPTY), ("   ", BLANK)]},
    **{f"{flag} {value!r}": ([flag, value], f"{flag}: {expected}")
       for flag in PATH_FLAGS for value, expected in [("", EMPTY), ("\t ", BLANK)]},
    **{f"{flag}=-x": ([f"{flag}=-x"], f"{flag}: {dash('-x')}") for flag in NAME_FLAGS},
    **{f"{flag}=-x": ([f"{flag}=-x"], f"{flag}: {dash('-x', 'path')}") for flag in PATH_FLAGS},
    **{f"{flag} {value!r}": ([flag, value], f"{flag}: {expected}")
       for flag in ["--match", "--launch"] for value, expected in [("", EMPTY), (" ", BLANK)]},
    "--docker=--privileged": (["--docker=--privileged"], f"--docker: {dash('--privileged')}"),
    "--namespace=--as=admin": (["--kubectl", "pod-0", "--namespace=--as=admin"], f"--namespace: {dash('--as=admin')}"),
    "--namespace ''": (["--kubectl", "pod-0", "--namespace", ""], f"--namespace: {EMPTY}"),
    "--namespace without a pod": (["--pct", "200", "--namespace", "ml"],
                                  "--namespace: only a kubectl pod has a namespace; give --kubectl POD with it"),
    "--host box --pct ''": (["--host", "127.0.0.1", "--pct", ""], f"--pct: {EMPTY}"),
    "--host with a ProxyCommand's words": (["--host", "box -oProxyCommand=x"],
                                           f"--host: {spaced('box -oProxyCommand=x')}"),
    "--host with an escape": (["--host", "box\x1b[2K"], f"--host: {control('box' + chr(27) + '[2K')}"),
    "--hosts ''": (["--hosts", ""], f"--hosts: {EMPTY}"),
    "--hosts ' '": (["--hosts", " "], f"--hosts: {BLANK}"),
    "--hosts 'nodeA,'": (["--hosts", "nodeA,"], f"--hosts: entry 2 {EMPTY}"),
    "--hosts 'nodeA, ,nodeB'": (["--hosts", "nodeA, ,nodeB"], f"--hosts: entry 2 {EMPTY}"),
    "--hosts 'nodeA,-x'": (["--hosts", "nodeA,-x"], f"--hosts: entry 2 {dash('-x')}"),
    "--root 0": (["--root", "0"], "--root: must be a process ID (1 or more), not 0"),
}


@pytest.fixture(scope="module")
def flag_results(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("flags")
    write_config(folder / "run.toml", run_config(folder))
    cases = {**FLAG_CASES, "--host -x": (["--host", "-x"], "")}
    return run_cases(folder, {name: ["restart", "{folder}/run.toml", *words, "--yes"] for name, (words, _) in cases.items()})


@pytest.mark.parametrize("case", FLAG_CASES)
def test_a_flag_that_names_no_target_refuses_the_restart_and_the_run_lives(flag_results, case: str) -> None:
    """U1 and the rough rows: `restart run.toml --host "" --yes` restarted the local run; now one line, exit 2."""
    assert_refused(flag_results[case], FLAG_CASES[case][1])


def test_a_dash_led_value_as_its_own_word_is_argparses_usage_error(flag_results) -> None:
    """`--host -x`: argparse takes -x for an option and refuses, exit 2, before Pulse reads anything."""
    seen = flag_results["--host -x"]
    assert seen["rc"] == 2 and seen["out"] == ""
    assert seen["err"].splitlines()[-1] == "pulse restart: error: argument --host: expected one argument"
    assert seen["run_alive"] and seen["new_logs"] == [] and seen["audit"] == []


# -- U4 and `host = ""`: config keys, on the restart that would have stopped the run first ------------

#: case → (section, key, TOML value, the key the line names, what it says)
CONFIG_CASES: dict[str, tuple[str, str, str, str, str]] = {
    **{f"{section}.{key} = {value!r}": (section, key, json.dumps(value), f"{section}.{key}", expected)
       for section, key, value, expected in [
           ("target", "host", "", EMPTY),
           ("target", "host", "-oProxyCommand=x", dash("-oProxyCommand=x")),
           ("target", "host", "gpu box", spaced("gpu box")),
           ("target", "slurm_job", "", EMPTY),
           ("target", "slurm_job", "-1", dash("-1")),
           *[("target", key, value, expected) for key in ("known_hosts", "ssh_config", "python", "py_spy", "nvidia_smi")
             for value, expected in [("", EMPTY), ("-x", dash("-x", "path"))]],
           ("run", "log", "-train_{started}.log", dash("-train_{started}.log", "path")),
           ("run", "log", "", EMPTY),
           ("run", "log", "train\n.log", control("train\n.log")),
           ("run", "cwd", "-work", dash("-work", "path")),
           ("run", "cwd", " ", BLANK),
           ("run", "pidfile", "-run.pid", dash("-run.pid", "path")),
           ("run", "pidfile", "", EMPTY),
       ]},
    "hosts with an empty entry": ("target", "hosts", '["nodeA", ""]', "target.hosts", f"entry 2 {EMPTY}"),
    "hosts with a dash-led entry": ("target", "hosts", '["-x"]', "target.hosts", f"entry 1 {dash('-x')}"),
    "docker id --privileged": ("target", "container", '{ kind = "docker", id = "--privileged" }',
                               "target.container.id", dash("--privileged")),
    "docker id empty": ("target", "container", '{ kind = "docker", id = "" }', "target.container.id", EMPTY),
    "pct id -5": ("target", "container", '{ kind = "pct", id = -5 }', "target.container.id", dash("-5")),
    "kubectl namespace --as=admin": ("target", "container", '{ kind = "kubectl", id = "pod-0", namespace = "--as=admin" }',
                                     "target.container.namespace", dash("--as=admin")),
    "kubectl namespace empty": ("target", "container", '{ kind = "kubectl", id = "pod-0", namespace = "" }',
                                "target.container.namespace", EMPTY),
}


@pytest.fixture(scope="module")
def config_results(tmp_path_factory) -> tuple[Path, dict, dict]:
    """Each case's config (the run's, one key set to the case's value) restarted with --yes by one scene."""
    folder = tmp_path_factory.mktemp("configs")
    cases, lines = {}, {}
    for number, (name, (section, key, value, _, _)) in enumerate(CONFIG_CASES.items()):
        sections = run_config(folder)
        sections[section][key] = value
        lines[name] = write_config(folder / f"case{number}.toml", sections)[f"{section}.{key}"]
        cases[name] = ["restart", f"{{folder}}/case{number}.toml", "--yes"]
    return folder, lines, run_cases(folder, cases)


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_a_config_value_that_names_no_target_is_refused_before_the_stop(config_results, case: str) -> None:
    """U4 and `host = ""`: the run was stopped and then the launch failed, or Pulse crashed; now
    `file:line: key: …`, exit 2, and the run was never stopped."""
    folder, lines, seen = config_results
    _, _, _, key, expected = CONFIG_CASES[case]
    number = list(CONFIG_CASES).index(case)
    assert_refused(seen[case], f"{folder}/case{number}.toml:{lines[case]}: {key}: {expected}")


# -- every command refuses before it acts: the console itself too -----------------------------------

COMMANDS = ["check", "dump", "restart", "warmup", "watch", "journal", "report", "console"]


def command_argv(command: str, config: str, *flags: str) -> list[str]:
    words = [config, *flags] if command == "console" else [command, config, *flags]
    return words + ["--yes"] * (command in ("restart", "warmup"))


COMMAND_CASES: dict[str, tuple[list[str], str]] = {
    **{f"{command} --host ''": (command_argv(command, "{folder}/run.toml", "--host", ""), f"--host: {EMPTY}")
       for command in COMMANDS},
    **{f"{command} host = ''": (command_argv(command, "{folder}/empty-host.toml"),
                                f"{{folder}}/empty-host.toml:2: target.host: {EMPTY}") for command in COMMANDS},
    "dump --pid -1": (["dump", "{folder}/run.toml", "--pid", "-1"], "--pid: must be a process ID (1 or more), not -1"),
    "restart ''": (["restart", "", "--yes"], f"pulse: config: {EMPTY}"),
    "console ''": ([""], f"pulse: config: {EMPTY}"),
    "classify --config ''": (["classify", "--config", "", "{folder}/run.toml"], f"pulse: --config: {EMPTY}"),
}


@pytest.fixture(scope="module")
def command_results(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("commands")
    write_config(folder / "run.toml", run_config(folder))
    sections = run_config(folder)
    sections["target"]["host"] = '""'
    write_config(folder / "empty-host.toml", sections)
    return folder, run_cases(folder, {name: words for name, (words, _) in COMMAND_CASES.items()})


@pytest.mark.parametrize("case", COMMAND_CASES)
def test_every_command_refuses_an_empty_target_before_it_acts(command_results, case: str) -> None:
    """check, dump, restart, warmup, watch, journal, report and the console: `pulse --host ""` exits 2 with
    the line and does not open; nothing is signalled, dumped, warmed up or journaled on this machine."""
    folder, seen = command_results
    assert_refused(seen[case], COMMAND_CASES[case][1].replace("{folder}", str(folder)))


# -- what reaches a helper program goes as --opt=VALUE or after `--` --------------------------------


def scene_dash_led_values_reach_the_agent(folder: str) -> dict:
    """A launch whose log, pidfile, cwd and environment value all start with '-', relative to this folder
    (where the agent starts), then a probe of that pidfile: the real process agent, this machine."""
    Scene(folder)
    os.chdir(folder)
    Path("-work").mkdir()
    target = LocalTarget()
    program = "import os; print(os.getcwd(), os.environ['PULSE_VALUE'], flush=True)"

    async def launch_and_probe() -> tuple[int, list[dict]]:
        launched = await launch(target, [sys.executable, "-c", program], log="-train.log", pidfile="-run.pid",
                                cwd="-work", env={"PULSE_VALUE": "-y"})
        return launched.ref.pid, await probe(target, [], "-run.pid", mark="-pulse-mark")

    pid, records = asyncio.run(launch_and_probe())
    wait_for(lambda: Path("-train.log").read_text(), "the launched program to write its log")
    return {"pid": pid, "log": Path("-train.log").read_text(), "pidfile": Path("-run.pid").read_text(),
            "probed": [r for r in records if r["ev"] == "pidfile"]}


def test_dash_led_values_reach_the_process_agent_as_values(tmp_path: Path) -> None:
    """U4's launch, had its values got past the config: `--log=-train.log`, not `--log -train.log`
    (argparse's 'expected one argument' after the run was stopped); cwd, env and pidfile the same."""
    seen = in_namespace(scene_dash_led_values_reach_the_agent, folder=str(tmp_path))
    assert seen["log"] == f"{tmp_path / '-work'} -y\n"
    assert seen["pidfile"].strip() == str(seen["pid"])
    [probed] = seen["probed"]  # the probe read the same file by the same dash-led name
    assert probed["status"] == "text" and probed["text"].strip() == str(seen["pid"])


def scene_py_spy_named_with_a_dash(folder: str) -> dict:
    """The real py-spy, reached on PATH by the name `-py-spy`, dumps the scene's run."""
    scene = Scene(folder)
    run = scene.start_run()
    bin_dir = Path(folder) / "bin"
    bin_dir.mkdir()
    (bin_dir / "-py-spy").symlink_to(Path(sys.executable).parent / "py-spy")
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    process = asyncio.run(dump(LocalTarget(), run.pid, py_spy="-py-spy", timeout=20.0))
    return {"run": run.pid, "dumped": process.pid,
            "files": sorted({Path(frame.file).name for thread in process.threads for frame in thread.frames})}


def test_py_spy_is_the_program_after_the_agents_double_dash(tmp_path: Path) -> None:
    """py-spy is the first word after `--` in the agent's argv: even a name that starts with '-' is the program run."""
    seen = in_namespace(scene_py_spy_named_with_a_dash, folder=str(tmp_path))
    assert seen["dumped"] == seen["run"]
    assert "healthy.py" in seen["files"]


@pytest.mark.parametrize("kind", ["pct", "docker", "kubectl"])
def test_container_ids_are_never_read_as_options(kind: str) -> None:
    """A container id is positional for pct, docker and kubectl alike (none takes `--` before it): the
    builder refuses one that starts with '-', as the config and the flags do first; a namespace is one
    word, `--namespace=NS`."""
    with pytest.raises(ValueError, match=f"a {kind} container id cannot start with '-'"):
        container_argv(Container(kind, "--privileged"), ["true"])
    if kind == "kubectl":
        assert container_argv(Container(kind, "pod-0", "ml"), ["true"]) == [
            "kubectl", "exec", "-i", "--namespace=ml", "pod-0", "--", "true"]
        with pytest.raises(ValueError, match="a kubectl namespace cannot start with '-'"):
            container_argv(Container(kind, "pod-0", "--as=admin"), ["true"])
