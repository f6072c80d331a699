"""Issue 30 row U5: Pulse quotes every placeholder itself, and a template cannot undo that quoting.

U5 was a viewer `command = 'tail -n 3 "{log}"'` (`mutating = false`, so it ran under
--read-only) while the newest log on the target was named `train_$(cd;touch pwned).log`: the
template's own double quotes turned Pulse's single quotes into literal characters and `pwned`
was created. Now a placeholder inside the template's quotes (or after a backslash, in `${…}`,
backquotes, arithmetic, a comment, a here-document) is a config error naming `file:line: key`,
and a bare `{log}` takes that file name as one literal word: locally inside a PID namespace
(the stand-in container) and through the test sshd, nothing named `pwned` appears anywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from console.actions.audit import ActionRefused, AuditLog
from console.actions.custom import ActionContext, fill_command, plan_custom
from console.actions.warmup import plan_warmup
from console.config import Config, ConfigError, CustomAction, WarmupConfig, parse_config
from console.monitor import Monitor
from console.placeholders import CUSTOM_PLACEHOLDERS, misplaced_placeholders
from console.remote.connect import make_target
from console.remote.target import LocalTarget
from console.state import RunState
from console.ui.dialogs.action_screen import ActionScreen
from console.ui.app import PulseApp
from tests.safety.namespace import in_namespace, pulse_beside_a_run
from tests.sshd import SESSION_PATH, TESTS_BIN, SshServer, start_sshd

HOSTILE_LOG = "train_$(cd;touch pwned).log"
WAIT_S = 60.0

# -- the template: a placeholder inside its own quotes is refused when the config is read ------------

#: (template, what the refusal says): every place where Pulse's quoting of a value would be undone.
MISPLACED = [
    ('tail -n 3 "{log}"', "{log} inside double quotes"),
    ("kill -0 '{pid}'", "{pid} inside single quotes"),
    ("tail \\{log}", "{log} right after a backslash"),
    ("echo ${log}", "{log} right after a $"),
    ("echo `cat {log}`", "{log} inside backquotes"),
    ("echo $'{host}'", "{host} inside $'…'"),
    ("echo ${x:-{log}}", "{log} inside ${…}"),
    ("echo $(( {gpu} + 1 ))", "{gpu} inside arithmetic (( … ))"),
    ("echo seen # {log}", "{log} in a comment"),
    ("cat <<EOF\n{log}\nEOF", "{log} in a here-document"),
    ('echo "$(tail "{log}")"', "{log} inside double quotes"),
]
#: Templates whose placeholders all stand bare (`$(…)` reads words afresh, even inside quotes).
BARE = [
    "tail -n 3 {log}",
    "awk '{print $1}' {log}",
    'echo "$(tail -n 1 {log})" {host}',
    "kill -0 {pids} && echo {pid}",
    "cat <<EOF\nplain\nEOF\necho {log}",
    "cat <<< {log}",
    "( echo {log} ); echo a#b {gpu}",
]


@pytest.mark.parametrize(("template", "said"), MISPLACED)
def test_each_place_that_undoes_the_quoting_is_named(template, said):
    assert misplaced_placeholders(template, CUSTOM_PLACEHOLDERS) == [said]


@pytest.mark.parametrize("template", BARE)
def test_bare_placeholders_are_accepted(template):
    assert misplaced_placeholders(template, CUSTOM_PLACEHOLDERS) == []


#: Names a target may give a log file: each must reach the command as this one word.
HOSTILE_VALUES = [HOSTILE_LOG, "x'; touch pwned; '", "a\"b$(touch pwned)`touch pwned`", "two\nlines; touch pwned",
                  "-n 1 --", "EOF", "'", "\\", "$HOME", "*"]
#: Accepted templates that print their placeholders' words, and what they print for a value V.
PRINTING = [
    ("printf '[%s]' {log}", "[V]"),
    ("printf '[%s]' x{log}y {host}", "[xVy][V]"),
    ("printf '[%s]' {pids}", "[V][V]"),
    ("( printf '[%s]' {log} ); printf '[%s]' a#b", "[V][a#b]"),
    ("cat <<EOF\nplain\nEOF\nprintf '[%s]' {gpu}", "plain\n[V]"),
    ("cat <<< {log}", "V\n"),
    ('echo "$(printf \'[%s]\' {pid})"', "[V]\n"),
]


def printed(template: str, value: str, folder: Path) -> str:
    """What real bash prints for `template` filled with `value` everywhere, run in `folder` (also $HOME)."""
    values = {name: [value, value] if name == "pids" else value for name in CUSTOM_PLACEHOLDERS}
    result = subprocess.run(["bash", "-c", fill_command(template, values)], cwd=folder, capture_output=True,
                            env={**os.environ, "HOME": str(folder)}, stdin=subprocess.DEVNULL, timeout=10)
    return result.stdout.decode("utf-8", "surrogateescape")


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(PRINTING), value=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40))
@example(case=PRINTING[0], value=HOSTILE_LOG)
def test_a_bare_placeholder_takes_any_value_as_one_literal_word(tmp_path_factory, case, value):
    """Real bash: each placeholder of an accepted template gives back exactly the value and runs nothing."""
    template, expected = case
    folder = tmp_path_factory.mktemp("bare")
    assert printed(template, value, folder) == expected.replace("V", value)
    assert list(folder.iterdir()) == [], "a value ran as a command"


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_named_hostile_values_arrive_literally(value, tmp_path):
    for template, expected in PRINTING:
        assert printed(template, value, tmp_path) == expected.replace("V", value), template
    assert list(tmp_path.iterdir()) == []


def config_file(folder: Path, body: str) -> Path:
    path = folder / "run.toml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(("template", "said"), [MISPLACED[0], MISPLACED[1], MISPLACED[2]])
def test_the_cli_refuses_a_quoted_placeholder_with_its_file_and_line(template, said, tmp_path):
    """The real `pulse`, in its own PID namespace: one line naming file:line: key, exit 2, nothing run."""
    command = template.replace("\\", "\\\\").replace('"', '\\"')
    config = config_file(tmp_path, f'[run]\nlog = "{tmp_path}/train_*.log"\n\n[[actions]]\nname = "tail log"\n'
                                   f'key = "L"\ncommand = "{command}"\nmutating = false\n')
    seen = in_namespace(pulse_beside_a_run, folder=str(tmp_path), argv=["check", str(config), "--json"])
    assert seen["rc"] == 2 and seen["out"] == ""
    assert seen["err"] == (f"{config}:7: actions[0].command: {said}: Pulse quotes each value itself;"
                           " write the placeholder bare, outside quotes\n")


def test_a_quoted_warmup_placeholder_is_a_config_error_too(tmp_path):
    with pytest.raises(ConfigError, match=r"^w\.toml:2: warmup\.command: \{gpu\} inside double quotes: "):
        parse_config('[warmup]\ncommand = "python3 w.py --gpu \\"{gpu}\\""\ngpus = [0]\nseq_lens = [8]\n', "w.toml")


def test_a_template_built_in_code_is_refused_when_filled():
    """The same rule where no config file was read: plan_custom and plan_warmup refuse in one line."""
    action = CustomAction(name="tail log", key="L", command='tail -n 3 "{log}"', mutating=False)
    with pytest.raises(ActionRefused, match=r"^action 'tail log': \{log\} inside double quotes: "):
        plan_custom(action, ActionContext(log=HOSTILE_LOG))
    warm = Config(warmup=WarmupConfig(command="echo '{seq_len}'", gpus=(0,), seq_lens=(8,)))
    with pytest.raises(ActionRefused, match=r"\[warmup\] command: \{seq_len\} inside single quotes: "):
        plan_warmup(warm)


# -- the hostile file really exists on the target, and the viewer runs on it ------------------------


@pytest.fixture(scope="module")
def home_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshServer, Path]]:
    """An sshd whose sessions have a home of their own (where `cd; touch pwned` would write)."""
    folder = tmp_path_factory.mktemp("u5-sshd")
    home = folder / "home"
    home.mkdir()
    server = start_sshd(folder, SetEnv=f"PATH={SESSION_PATH} HOME={home}")
    try:
        yield server, home
    finally:
        server.stop()


async def until(pilot, condition, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"waited {WAIT_S:g} s for {what}")
        await pilot.pause(0.05)


@pytest.mark.parametrize("where", ["local", "ssh"])
async def test_a_hostile_log_name_reaches_a_read_only_viewer_as_one_word(where, request, tmp_path, monkeypatch):
    """The newest log is `train_$(cd;touch pwned).log`; `L` (tail -n 3 {log}, a viewer) runs under
    --read-only on it: its last lines come back, nothing named pwned is created, the audit says so."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train_old.log").write_text("old\n")
    hostile = logs / HOSTILE_LOG
    hostile.write_text("one\ntwo\nthree\nfour\n")
    os.utime(hostile, (os.stat(logs / "train_old.log").st_mtime + 10,) * 2)  # the newest: the one followed
    audit = AuditLog(tmp_path / "audit.jsonl")
    config = parse_config(
        f'audit_log = "{audit.path}"\n[run]\nlog = "{logs}/train_*.log"\n[gpus]\npoll_s = 0.2\n'
        '[[actions]]\nname = "tail log"\nkey = "L"\ncommand = "tail -n 3 {log}"\nconfirm = false\nmutating = false\n',
        "viewer.toml",
    )
    if where == "local":
        namespace = request.getfixturevalue("pid_namespace")  # the action runs inside its own PID namespace
        monkeypatch.setenv("PATH", f"{TESTS_BIN}:{os.environ['PATH']}")
        home = tmp_path / "home"
        home.mkdir()
        monkeypatch.setenv("HOME", str(home))
        target = LocalTarget(namespace.container)
    else:
        server, home = request.getfixturevalue("home_sshd")
        config = dataclasses.replace(config, target=server.target_config())
        target = make_target(config.target)
    state = RunState()
    app = PulseApp(config, state, target=target, read_only=True,
                   monitor_factory=lambda changed: Monitor(config, target, state, changed))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: state.log_path == str(hostile), "the follower to open the newest log")
        await pilot.press("L")
        await until(pilot, lambda: isinstance(app.screen, ActionScreen) and app.screen.done, "the viewer to end")
        output = list(app.screen.query_one("#output").lines)
    assert output == ["tail log: two", "tail log: three", "tail log: four"]
    [entry] = audit.entries()
    assert entry["outcome"] == "ok: exit 0" and entry["plan"]["mutating"] is False
    assert entry["plan"]["command"] == f"tail -n 3 {shlex.quote(str(hostile))}"
    assert sorted(p.name for p in logs.iterdir()) == sorted([HOSTILE_LOG, "train_old.log"])
    assert not [*home.rglob("pwned"), *tmp_path.rglob("pwned")]
