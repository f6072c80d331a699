"""The restart policy of `pulse watch` (console/journal/policy.py, pure) and how it is given: the
config's [watch] table, the flags that win over it, and the refusals, each one line and exit 2."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from console.cli import main
from console.config import ConfigError, WatchConfig, parse_config
from console.diagnose import Evidence, StackSummary, Verdict
from console.journal.policy import RestartPolicy, policy_problem, saved_evidence
from console.journal.report import saved_evidence_lines
from console.model import GpuReading


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def policy(clock: Clock, **fields) -> RestartPolicy:
    watch = WatchConfig(**{"restart_on": ("hung", "dead"), "max_restarts": 2, "restart_after_s": 60.0,
                           "restart_window_s": 3600.0, **fields})
    return RestartPolicy(watch, clock=clock, rng=random.Random(7))


def feed(p: RestartPolicy, clock: Clock, name: str, seconds: float, step: float = 5.0) -> list:
    """The verdict `name` every `step` seconds for `seconds`; the decisions, restarting on each "restart"."""
    out = []
    end = clock.now + seconds
    while clock.now < end:
        decision = p.observe(name)
        if decision is not None:
            out.append((round(clock.now - 1_000_000.0), decision.action))
            if decision.action == "restart":
                p.restarted()
        clock.now += step
    return out


def test_a_verdict_that_lasts_the_wait_restarts_once_and_the_wait_starts_again():
    clock = Clock()
    p = policy(clock)
    assert feed(p, clock, "healthy", 30) == []
    assert feed(p, clock, "hung", 55) == []  # 0 … 50 s of hung: not yet
    assert p.due() is False
    clock.now += 5
    assert p.due()
    decision = p.observe("hung")
    assert decision.action == "restart" and decision.count == 1
    assert decision.text == "hung for 1m 00s: automatic restart 1 of at most 2 in 1h 00m"
    p.restarted()
    assert not p.due() and p.observe("hung") is None  # the new run is judged from scratch


def test_a_stretch_is_any_of_the_verdicts_and_ends_with_another():
    clock = Clock()
    p = policy(clock)
    assert feed(p, clock, "hung", 30) == []
    assert feed(p, clock, "dead", 30) == []  # still one stretch: 60 s at the next verdict
    assert p.observe("dead").action == "restart"
    p.restarted()
    clock.now += 300
    assert feed(p, clock, "hung", 55) == [] and feed(p, clock, "slow", 5) == []
    assert feed(p, clock, "hung", 55) == []  # a new stretch after the slow verdict


def test_the_limit_is_said_once_per_stretch_and_the_window_frees_it():
    clock = Clock()
    p = policy(clock, max_restarts=1)
    assert feed(p, clock, "hung", 65) == [(60, "restart")]
    assert feed(p, clock, "hung", 600) == [(125, "limit")]  # said once, then nothing more
    limit = p.observe  # the text names the count, the window and the max
    clock.now += 1
    assert limit("hung") is None
    feed(p, clock, "healthy", 10)
    decision = p.observe("hung")
    assert decision is None
    clock.now += 3600  # the restart left the window
    assert feed(p, clock, "hung", 65)[-1][1] == "restart"


def test_the_limit_says_how_many_in_which_window():
    clock = Clock()
    p = policy(clock, max_restarts=1)
    feed(p, clock, "hung", 65)
    clock.now += 120
    p.observe("hung")
    clock.now += 60
    decision = p.observe("hung")
    assert decision.action == "limit"
    assert decision.text == ("hung for 1m 00s, but 1 automatic restart in the last 1h 00m already (max 1):"
                             " not restarting; still watching")


def test_restarts_back_off_doubling_from_the_wait():
    clock = Clock()
    p = policy(clock, max_restarts=10, restart_window_s=24 * 3600.0)
    times = [at for at, action in feed(p, clock, "hung", 3000, step=1.0) if action == "restart"]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # Each gap is the longer of the wait (60 s) and the backoff: 60, 120, 240 … s, each 75-100 % of it.
    assert len(gaps) >= 4 and all(later > earlier for earlier, later in zip(gaps[1:], gaps[2:])), gaps
    assert 0.75 * 240 <= gaps[2] <= 240 + 1 and 0.75 * 480 <= gaps[3] <= 480 + 1, gaps


def test_restarts_journaled_before_the_watch_began_still_count():
    clock = Clock()
    p = RestartPolicy(WatchConfig(restart_on=("hung",), max_restarts=1, restart_after_s=60.0, restart_window_s=3600.0),
                      earlier=[clock.now - 600], clock=clock)
    assert feed(p, clock, "hung", 65) == [(60, "limit")]
    old = RestartPolicy(WatchConfig(restart_on=("hung",), max_restarts=1, restart_after_s=60.0, restart_window_s=3600.0),
                        earlier=[clock.now - 7200], clock=clock)
    assert feed(old, clock, "hung", 65)[-1][1] == "restart"


@pytest.mark.parametrize(
    ("watch", "message"),
    [
        (WatchConfig(restart_on=("hang",), restart_on_source="--restart-on", max_restarts=1),
         "--restart-on: 'hang' is not a verdict (verdicts: healthy, slow, buffered, hung,"),
        (WatchConfig(restart_on=("healthy",), restart_on_source="r.toml:7: watch.restart_on", max_restarts=1),
         "r.toml:7: watch.restart_on: 'healthy' is no problem to restart a run for"),
        (WatchConfig(restart_on=("hung",), restart_on_source="--restart-on"),
         "--restart-on: needs --max-restarts N (or [watch] max_restarts)"),
        (WatchConfig(max_restarts=2), "--max-restarts needs --restart-on VERDICT"),
    ],
)
def test_a_policy_that_cannot_run_is_named_in_one_line(watch, message):
    assert message in policy_problem(watch)


def test_the_watch_table_and_the_flags_over_it():
    config = parse_config('[watch]\nrestart_on = ["hung", "dead"]\nmax_restarts = 3\nrestart_window = "2h"\n'
                          'restart_after = 90\nmetrics = "0.0.0.0:9464"\n', "r.toml")
    assert config.watch == WatchConfig(("hung", "dead"), "r.toml:2: watch.restart_on", 3, 7200.0, 90.0, ("0.0.0.0", 9464))
    assert WatchConfig().restart_window_s == 6 * 3600 and WatchConfig().restart_after_s == 600
    with pytest.raises(ConfigError) as bad:
        parse_config('[watch]\nrestart_after = "soon"\nmetrics = "gpu-box"\nmax_restarts = 0\n', "r.toml")
    assert sorted(bad.value.problems) == [
        "r.toml:2: watch.restart_after: give a duration such as 90s, 30m, 6h, 2d or 1h30m",
        "r.toml:3: watch.metrics: 'gpu-box' is not HOST:PORT (e.g. 127.0.0.1:9464, or :9464 for this machine only)",
        "r.toml:4: watch.max_restarts: must be 1 or more",
    ]


def _config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\nname = "train"\nmatch = "never-matches-{tmp_path.name}"\nlaunch = "true"\n{extra}')
    return str(path)


@pytest.mark.parametrize(
    ("args", "extra", "message"),
    [
        (["--restart-on", "hung", "--max-restarts", "1", "--read-only"], "",
         "pulse watch: --read-only: the restart policy (--restart-on, [watch] restart_on) restarts the run; drop one of them"),
        (["--restart-on", "hung,stuck", "--max-restarts", "1"], "", "pulse watch: --restart-on: 'stuck' is not a verdict"),
        (["--restart-on", "hung,", "--max-restarts", "1"], "", "--restart-on: give verdict names separated by commas"),
        (["--max-restarts", "1"], '[watch]\nrestart_on = ["hang"]\n',
         "pulse watch: {config}:6: watch.restart_on: 'hang' is not a verdict"),
        (["--restart-on", "hung"], "", "pulse watch: --restart-on: needs --max-restarts N"),
        (["--restart-on", "hung", "--max-restarts", "0"], "", "--max-restarts: must be 1 or more, not 0"),
        (["--restart-on", "hung", "--max-restarts", "1", "--restart-after", "10 min"], "",
         "--restart-after: give a duration such as 90s, 30m, 6h, 2d or 1h30m, not '10 min'"),
        (["--metrics", "gpu-box:http"], "", "--metrics: 'gpu-box:http' is not HOST:PORT"),
        (["--metrics", "203.0.113.9:9464"], "", "pulse watch: --metrics 203.0.113.9:9464: cannot listen there ("),
    ],
)
def test_a_watch_that_cannot_act_or_serve_as_asked_is_refused_in_one_line(tmp_path, monkeypatch, capsys, args, extra, message):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = _config(tmp_path, extra)
    assert main(["watch", config, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(config=config) in err[0], err
    assert not (tmp_path / "state").exists()  # refused before the journal was opened


def test_the_policy_needs_a_launch_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = tmp_path / "run.toml"
    config.write_text('[run]\nmatch = "never-matches"\n[watch]\nrestart_on = ["hung"]\nmax_restarts = 1\n')
    assert main(["watch", str(config)]) == 2
    assert capsys.readouterr().err == (f"pulse watch: {config}: the restart policy needs [run] launch (or --launch):"
                                       " the command that starts the run\n")


def test_the_saved_evidence_reads_back_as_lines():
    stack = StackSummary(pid=41, tid=41, name="MainThread", idle=True, wait="queue", where="Queue.get ← loop (train.py:9)",
                         label="rank 0 · GPU 0", motion="still")
    gpu = GpuReading(0, "GPU-0", "H200", 81000, 143771, 0.0, 34.0, 118.5, 700.0)
    evidence = Evidence(window_s=1.5, stacks=(stack,), gpus=(gpu,), stacks_missing=("rank 1: py-spy: permission denied",))
    verdict = Verdict("hung", "every thread waits", ["thread waits on queue"], "dump the stacks", "dump")
    saved = saved_evidence(verdict, evidence, [f"step {n}" for n in range(100)])
    assert saved["stacks"] == ['rank 0 · GPU 0 (pid 41) thread "MainThread" waiting on queue, still while recorded:'
                               " Queue.get ← loop (train.py:9)", "not dumped: rank 1: py-spy: permission denied"]
    assert saved["log_tail"] == [f"step {n}" for n in range(70, 100)]
    assert saved["gpus"] == ["GPU 0 H200: util 0%, memory 81000/143771 MiB, power 118 W, 34 °C"]
    lines = saved_evidence_lines(saved)
    assert lines[0] == "hung: every thread waits" and "stacks:" in lines and "  step 99" in lines
