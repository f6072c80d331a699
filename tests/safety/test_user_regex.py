"""Issue 11 row 16: a regex from the config cannot hang Pulse.

Row 16 was `[metrics] patterns = {loss = "loss=(?P<value>([0-9]+)+)x"}` on a line of 32 digits:
`pulse classify` hung in catastrophic backtracking, and the console's follower would have too.
Config patterns now run through the `regex` package with a time budget per line, on lines
capped to USER_PATTERN_CHARS; one past its budget is disabled with a notice naming it. The
run's `match` regex runs in the agent on the target (standard library only) under a CPU-time
budget per command line, and is disabled the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.config import ConfigError, parse_config
from console.model import MetricPattern
from console.observe import agent
from console.observe.lines import classify_line
from console.user_patterns import USER_PATTERN_CHARS, MetricPatterns
from console.monitor import Monitor
from console.remote.target import LocalTarget
from console.state import RunState
from console.ui.app import PulseApp
from tests.safety.namespace import REPO
from tests.snapshot_apps.scenarios import record_notices

#: The row's pattern, and one that backtracks catastrophically in the `regex` package too
#: (on a format the built-in rules do not read, so what it yields is its own).
ROW_16 = r"loss=(?P<value>([0-9]+)+)x"
WORST = r"zz=(?P<value>(\d|\d\d)+)x"
WAIT_S = 60.0


def classify(tmp_path: Path, patterns: str, log: str) -> subprocess.CompletedProcess:
    config = tmp_path / "patterns.toml"
    config.write_text(f"[metrics]\npatterns = {{ {patterns} }}\n")
    (tmp_path / "train.log").write_text(log)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "console.cli", "classify", str(tmp_path / "train.log"), "--config", str(config)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("pattern", [ROW_16, WORST], ids=["row 16", "backtracks in regex too"])
def test_classify_finishes_and_a_runaway_pattern_is_named(tmp_path: Path, pattern: str) -> None:
    prefix = pattern.split("=")[0]
    log = f"{prefix}=" + "1" * 60 + f" x\nstep 7 | loss 2.31 | 14.2K tok/s\n{prefix}=35x\n"
    done = classify(tmp_path, f"loss = '{pattern}'", log)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == 3
    assert out[1]["tokens_per_s"] == 14200.0 and out[1]["loss"] == 2.31  # the built-in rules carry on
    if pattern == WORST:
        assert done.stderr == (
            f"pulse classify: [metrics] patterns.loss {WORST!r} took more than 100 ms on one line: "
            "disabled until Pulse restarts (fix the pattern)\n"
        )
        assert out[2]["loss"] is None  # disabled: it no longer runs, even on a line it would match
    else:  # the `regex` package recognises this one and needs no budget
        assert done.stderr == "" and out[2]["loss"] == 35


def test_a_disabled_pattern_stops_running_and_the_others_go_on() -> None:
    runaway = MetricPattern("step", r"st=(?P<value>(\d|\d\d)+)#")
    kept = MetricPattern("loss", r"myloss:(?P<value>[0-9.]+)")
    told: list[str] = []
    patterns = MetricPatterns((runaway, kept), on_disabled=told.append)
    classify_line("st=" + "7" * 60 + " myloss:1.5 #", patterns)
    assert [n for n in told if f"[metrics] patterns.step {runaway.regex!r} took more than" in n] == told != []
    assert list(patterns.disabled.values()) == told
    info = classify_line("st=12# myloss:2.5", patterns)
    assert info.step is None and info.loss == 2.5
    assert len(told) == 1  # said once
    assert classify_line("st=12# myloss:2.5", MetricPatterns((runaway, kept))).step == 12  # another reader's own budget


def test_lines_are_capped_before_a_user_pattern_sees_them() -> None:
    # a key the built-ins do not read (they take a line's only `*_loss` key as its loss)
    pattern = MetricPatterns((MetricPattern("loss", r"capped=(?P<value>[0-9.]+)"),))
    assert classify_line("capped=1.5 " + "x" * (2 * USER_PATTERN_CHARS), pattern).loss == 1.5
    assert classify_line("x" * USER_PATTERN_CHARS + " capped=1.5", pattern).loss is None


def test_an_invalid_pattern_is_still_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^c\.toml:2: metrics\.patterns\.loss: metric pattern '\(\?P<value>\[0-9': "):
        parse_config("[metrics]\npatterns = { loss = '(?P<value>[0-9' }\n", "c.toml")


async def test_the_console_says_which_pattern_it_disabled(tmp_path: Path) -> None:
    """The follower classifies the run's log with the config's patterns: a runaway one is named in a notice."""
    log = tmp_path / "train.log"
    log.write_text("tps=" + "9" * 60 + " tok/s\nstep 1 | loss 2.0 | 14.2K tok/s\n")
    runaway = r"tps=(?P<value>(\d|\d\d)+)/s"
    config = parse_config(f"[run]\nlog = '{log}'\n[metrics]\npatterns = {{ tokens_per_s = '{runaway}' }}\n", "c.toml")
    state = RunState()
    target = LocalTarget()
    app = PulseApp(config, state, target=target, monitor_factory=lambda changed: Monitor(config, target, state, changed))
    record_notices(app)
    async with app.run_test(size=(120, 40)) as pilot:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not any(repr(runaway) in n.message for n in app.notices):
            assert loop.time() < deadline, "no notice of the disabled pattern"
            await pilot.pause(0.05)
        assert state.lines_received == 2
    [notice] = [n for n in app.notices if repr(runaway) in n.message]
    assert notice.title == "pattern disabled" and "patterns.tokens_per_s" in notice.message


# -- the match regex, in the agent on the target ---------------------------------------------


@pytest.fixture
def long_command_line():
    """A real process whose command line makes `(x|xx)+$` backtrack: 40 x's, then not an x."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "x" * 40 + "!"],
                               stdin=subprocess.DEVNULL)
    # Until it has exec'd, /proc shows the parent's command line: the regex would have nothing to chew on.
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 10
    while b"x" * 40 not in cmdline.read_bytes():
        assert time.monotonic() < deadline, "the child never showed its command line"
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def test_a_runaway_match_regex_is_disabled_in_the_agent_with_its_name(long_command_line) -> None:
    watch = agent.ProcessWatch(r"(x|xx)+$", "")
    readings, error = watch.read()
    expected = (f"the match regex '(x|xx)+$' took more than {agent.MATCH_BUDGET_S:g} s of CPU on one command line: "
                "disabled; fix [run] match")
    assert (readings, error) == ([], expected)
    assert watch.read() == ([], expected)  # disabled: not run again


def test_the_match_regex_sees_the_first_match_chars_of_a_command_line() -> None:
    procs = [{"pid": 7, "ppid": 1, "comm": "python3", "argv": ["python3", "-u", "pad" * agent.MATCH_CHARS, "train.py"]},
             {"pid": 8, "ppid": 1, "comm": "python3", "argv": ["python3", "-u", "train.py", "pad" * agent.MATCH_CHARS]}]
    assert [r["pid"] for r in agent.select_run_processes(procs, r"train\.py", [])] == [8]
