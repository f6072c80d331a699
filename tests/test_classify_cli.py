"""`pulse classify` as a real subprocess: a file, standard input, a pipe that stays open, a config's patterns."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parent.parent


def classify(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console.cli", "classify", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )


def objects(stdout: bytes) -> list[dict]:
    return [json.loads(line) for line in stdout.decode().splitlines()]


def test_file_gives_one_object_per_line_in_order() -> None:
    result = classify(str(FIXTURES / "h200" / "hung.log"))
    assert result.returncode == 0 and result.stderr == b""
    found = objects(result.stdout)
    # the thread's traceback is one block: its frames and source lines take its kind
    assert [item["kind"] for item in found] == ["normal"] + ["traceback"] * 9
    assert found[0] == {
        "kind": "normal",
        "tokens_per_s": 14200.0,
        "samples_per_s": None,
        "it_per_s": None,
        "loss": 2.31,
        "step": 1,
        "total_steps": None,
        "lr": None,
        "grad_norm": None,
        "mfu": None,
    }


def test_stdin_with_invalid_utf8_escapes_and_no_final_newline() -> None:
    raw = (
        b"\x1b]52;c;cm0gLXJmIH4=\x07\x1b[31mstep 2 | loss 1.5\x1b[0m\n"
        b"\xff\xfe garbage \x00\x9b\n"
        b"\r 10%|#  | 10/100 [00:01<00:09, 9.50it/s]\r 20%|## | 20/100 [00:02<00:08, 9.60it/s]\n"
        b"torch.OutOfMemoryError: CUDA out of memory"
    )
    result = classify(stdin=raw)
    assert result.returncode == 0
    found = objects(result.stdout)
    assert len(found) == 4
    assert (found[0]["kind"], found[0]["loss"], found[0]["step"]) == ("normal", 1.5, 2)
    assert found[1]["kind"] == "normal"
    assert (found[2]["step"], found[2]["total_steps"], found[2]["it_per_s"]) == (20, 100, 9.6)
    assert found[3]["kind"] == "oom"


def test_framework_log_through_the_cli_matches_the_library() -> None:
    from console.observe.lines import LineReader
    from console.observe.textsafe import sanitize

    path = FIXTURES / "logs" / "torchtitan.log"
    reader = LineReader()
    expected = [reader.read(sanitize(raw)[0]).as_json() for raw in path.read_bytes().split(b"\n")[:-1]]
    assert objects(classify(str(path)).stdout) == expected


def test_empty_input_prints_nothing() -> None:
    result = classify(stdin=b"")
    assert (result.returncode, result.stdout) == (0, b"")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/nonexistent/train.log", "pulse classify: /nonexistent/train.log: no such file"),
        ("/", "pulse classify: /: cannot read: Is a directory"),
    ],
)
def test_unreadable_file_is_one_line_and_exit_2(path: str, message: str) -> None:
    result = classify(path)
    assert result.returncode == 2
    assert result.stderr.decode() == message + "\n"
    assert result.stdout == b""


def test_output_is_flushed_while_the_pipe_stays_open() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "console.cli", "classify"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            for step in (1, 2):
                process.stdin.write(b"step %d | loss 2.0 | 1.5K tok/s\n" % step)
                process.stdin.flush()
                assert selector.select(timeout=30), "no output while the input stays open"
                assert json.loads(process.stdout.readline())["step"] == step
        process.stdin.close()
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_config_patterns_are_applied(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text("[metrics]\npatterns = { samples_per_s = 'GlobalRate=(?P<value>[\\d.]+)' }\n")
    # torch_xla's line (pytorch/xla#4324): the built-ins read its step and loss, not its rates
    line = b"| Training Device=xla:0/5 Epoch=1 Step=340 Loss=0.00373 Rate=545.27 GlobalRate=300.64 Time=01:52:42\n"
    without = objects(classify(stdin=line).stdout)[0]
    assert (without["samples_per_s"], without["step"], without["loss"]) == (None, 340, 0.00373)
    found = objects(classify("--config", str(config), stdin=line).stdout)[0]
    assert (found["samples_per_s"], found["step"], found["loss"]) == (300.64, 340, 0.00373)


def test_bad_config_is_reported_with_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[metrics]\npatterns = { speed = "x" }\n')
    result = classify("--config", str(config), stdin=b"step 1\n")
    assert result.returncode == 2
    assert result.stderr.decode().startswith(f"{config}:2: metrics.patterns.speed:")
    assert result.stdout == b""
