"""py-spy dump parsing: the H200 captures, and the real py-spy on a real process hung in known places."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.observe.pyspy import (
    LocalVariable,
    ProcessDump,
    StackFrame,
    ThreadStack,
    classify_error,
    classify_wait,
    dump_lines,
    group_identical,
    is_user_frame,
    parse_dump_json,
    parse_dump_text,
)

H200 = Path(__file__).parent / "fixtures" / "h200"
PY_SPY = str(Path(sys.executable).parent / "py-spy")

H200_STACK = (
    StackFrame("Condition.wait", "threading.py", 355),
    StackFrame("Queue.get", "queue.py", 171),
    StackFrame("pack_hidden", "hung.py", 9),
    StackFrame("<module>", "hung.py", 12),
)


def capture(name: str) -> str:
    return (H200 / name).read_text()


# -- the H200 captures -------------------------------------------------------------


def test_h200_plain_dump() -> None:
    (dump,) = parse_dump_text(capture("pyspy_dump.txt"))
    assert dump == ProcessDump(
        pid=447,
        command="python3 -u hung.py",
        python_version="3.12.3",
        executable="/usr/bin/python3.12",
        threads=(ThreadStack(447, 447, "MainThread", False, False, H200_STACK),),
    )
    assert dump.threads[0].status == "idle"
    assert classify_wait(dump.threads[0]) == "queue get"


def test_h200_native_dump() -> None:
    (dump,) = parse_dump_text(capture("pyspy_dump_native.txt"))
    frames = dump.threads[0].frames
    assert frames[0] == StackFrame("0x7f5bb0298e51", "libc.so.6", None, native=True)
    assert frames[2] == StackFrame("PyThread_acquire_lock_timed", "python3.12", None, native=True)
    assert tuple(frame for frame in frames if not frame.native) == H200_STACK
    assert classify_wait(dump.threads[0]) == "queue get"


def test_h200_locals_dump() -> None:
    (dump,) = parse_dump_text(capture("pyspy_dump_locals.txt"))
    wait, get, pack, module = dump.threads[0].frames
    assert wait.locals == (
        LocalVariable("self", "<Condition at 0x7f5acdcb8c20>", True),
        LocalVariable("timeout", "None", True),
        LocalVariable("waiter", "<_thread.lock at 0x7f5accecc4c0>", False),
        LocalVariable("saved_state", "None", False),
        LocalVariable("gotit", "False", False),
    )
    assert [variable.name for variable in get.locals] == ["self", "block", "timeout"]
    assert pack.locals == (LocalVariable("batch", "1", True),)
    assert module.locals == ()
    assert (pack.function, pack.file, pack.line) == ("pack_hidden", "hung.py", 9)


def test_h200_json_dump() -> None:
    (dump,) = parse_dump_json(capture("pyspy_dump.json"))
    (thread,) = dump.threads
    assert (dump.pid, thread.thread_id, thread.name, thread.active, thread.owns_gil) == (447, 447, "MainThread", False, False)
    assert [(f.function, f.file, f.line, f.native) for f in thread.frames] == [
        ("Condition.wait", "/usr/lib/python3.12/threading.py", 355, False),
        ("Queue.get", "/usr/lib/python3.12/queue.py", 171, False),
        ("pack_hidden", "/tmp/cap/hung.py", 9, False),
        ("<module>", "/tmp/cap/hung.py", 12, False),
    ]
    assert [is_user_frame(frame) for frame in thread.frames] == [False, False, True, True]
    assert classify_wait(thread) == "queue get"


def test_one_rendering_folds_identical_stacks_and_marks_the_runs_frames() -> None:
    """A real HF worker hang (tests/data/real/hf_worker_hang): two identical feeder threads print once,
    counted and named; `pulse dump` prints these lines and the console's dump screen styles the same ones."""
    (dump,) = parse_dump_json((Path(__file__).parent / "data/real/hf_worker_hang/pyspy/598.json").read_text())
    lines = dump_lines(dump)
    assert lines[0].text == "Process 598" and lines[0].kind == "process"
    headings = [line.text for line in lines if line.kind == "thread"]
    assert len(headings) == len(group_identical(dump.threads)) == len(dump.threads) - 1
    assert headings[0] == (
        '  Thread 1721 "QueueFeederThread": idle, lock/condition wait  [x2 identical stacks; also QueueFeederThread]'
    )
    assert '  Thread 598 "MainThread": idle, queue get' in headings
    assert [line.text for line in lines if line.kind == "user"] == [
        "      > <module> (/work/main/.gpucap/scripts/gpu/hf_trainer.py:75)"
    ]
    assert all(line.text.startswith("        ") for line in lines if line.kind == "library")


def test_h200_missing_pid_error() -> None:
    code, advice = classify_error(capture("pyspy_nopid.txt"), 1)
    assert code == "no_such_process"
    assert "PID namespace" in advice and "\n" not in advice


def test_not_a_dump_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="^not py-spy dump output: 'Error: Failed to get process"):
        parse_dump_text(capture("pyspy_nopid.txt"))
    with pytest.raises(ValueError, match="^not py-spy --json output"):
        parse_dump_json("Error: something\n")
    with pytest.raises(ValueError, match="unexpected shape"):
        parse_dump_json('[{"thread_id": 1}]')


def test_coloured_dump_is_read_like_a_plain_one() -> None:
    coloured = capture("pyspy_dump.txt").replace("447", "\x1b[1m\x1b[33m447\x1b[0m", 1)
    assert parse_dump_text(coloured) == parse_dump_text(capture("pyspy_dump.txt"))


# -- reading stacks ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "user"),
    [
        (StackFrame("train", "/workspace/train.py", 10), True),
        (StackFrame("<module>", "<stdin>", 3), True),
        (StackFrame("forward", "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", 1), False),
        (StackFrame("get", "/usr/lib/python3/dist-packages/foo.py", 1), False),
        (StackFrame("wait", "/usr/lib/python3.12/threading.py", 355), False),
        (StackFrame("_find_and_load", "<frozen importlib._bootstrap>", 1), False),
        (StackFrame("Queue.get", "queue.py", 171), False),
        (StackFrame("step", "mytrainer/loop.py", 8), True),
        (StackFrame("0x7f5bb0298e51", "libc.so.6", None, native=True), False),
    ],
)
def test_is_user_frame(frame: StackFrame, user: bool) -> None:
    assert is_user_frame(frame) is user


def thread(*frames: tuple, active: bool = False) -> ThreadStack:
    return ThreadStack(1, 1, "t", active, False, tuple(StackFrame(*frame) for frame in frames))


@pytest.mark.parametrize(
    ("stack", "wait"),
    [
        (thread(("all_reduce", "torch/distributed/distributed_c10d.py", 2501), ("step", "train.py", 9)), "NCCL collective"),
        (
            thread(
                ("c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long>)", "libtorch_cuda.so", None, True),
                ("barrier", "torch/distributed/distributed_c10d.py", 4100),
            ),
            "NCCL collective",
        ),
        (thread(("Barrier.wait", "threading.py", 700), ("run", "train.py", 3)), "lock/condition wait"),
        (thread(("synchronize", "torch/cuda/__init__.py", 985), ("step", "train.py", 9)), "CUDA synchronize"),
        (thread(("cudaStreamSynchronize", "libcudart.so.12", None, True), ("item", "x.py", 1)), "CUDA synchronize"),
        (thread(("Event.wait", "threading.py", 629)), "lock/condition wait"),
        (thread(("Lock.acquire", "threading.py", 1)), "lock/condition wait"),
        (thread(("_recv_bytes", "multiprocessing/connection.py", 430), ("recv", "x.py", 1)), "I/O"),
        (thread(("socket.recv", "socket.py", 1)), "I/O"),
        (thread(("__GI___poll", "libc.so.6", None, True)), "I/O"),
        (thread(("clock_nanosleep", "libc.so.6", None, True), ("sleeper", "x.py", 8)), "sleep"),
        (thread(("forward", "model.py", 80), ("main", "train.py", 2), active=True), "running"),
        (thread(("sleeper", "x.py", 8)), "unknown"),
        (thread(), "unknown"),
    ],
)
def test_classify_wait(stack: ThreadStack, wait: str) -> None:
    assert classify_wait(stack) == wait


def test_group_identical_counts_same_stacks() -> None:
    worker = thread(("Condition.wait", "threading.py", 355), ("Queue.get", "queue.py", 171))
    other = thread(("forward", "model.py", 80), active=True)
    groups = group_identical([other, worker, worker, worker])
    assert groups == [(3, worker), (1, other)]
    assert group_identical([]) == []


@pytest.mark.parametrize(
    ("stderr", "status", "code"),
    [
        ("Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'", 1, "permission_denied"),
        ("Error: Failed to open process - check if it is running.\nReason: Operation not permitted (os error 1)", 1, "permission_denied"),
        ("Permission Denied\n\nIt looks like you are running in a docker container. Please make sure ...", 1, "permission_denied"),
        ("Error: Failed to find python version from target process", 1, "unsupported_python"),
        ("Error: Unsupported version of Python: 3.15.0", 1, "unsupported_python"),
        ("bash: line 1: py-spy: command not found", 127, "not_found"),
        ("sh: 1: py-spy: not found", 127, "not_found"),
        ("", 124, "timeout"),
        ("Error: Failed to suspend process\nReason: timed out", 1, "timeout"),
    ],
)
def test_classify_error(stderr: str, status: int, code: str) -> None:
    found, advice = classify_error(stderr, status)
    assert found == code
    assert advice and "\n" not in advice


def test_unknown_error_names_the_first_error_line() -> None:
    assert classify_error("warming up\nError: Failed to copy PyCodeObject\nmore", 1) == (
        "unknown",
        "py-spy failed (exit 1): Error: Failed to copy PyCodeObject",
    )
    assert classify_error("", 1) == ("unknown", "py-spy failed (exit 1): no message")


# -- the real py-spy on a real process ---------------------------------------------------------

HUNG_PROGRAM = """
import queue, socket, threading, time
q = queue.Queue()
threading.Thread(target=threading.Event().wait, name="EventWaiter", daemon=True).start()
threading.Thread(target=time.sleep, args=(600,), name="Sleeper", daemon=True).start()
left, right = socket.socketpair()
threading.Thread(target=left.recv, args=(1,), name="Reader", daemon=True).start()
def consume():
    return q.get()
for n in range(3):
    threading.Thread(target=consume, name=f"Worker-{n}", daemon=True).start()
time.sleep(0.3)
print("ready", flush=True)
consume()
"""


@pytest.fixture(scope="module")
def hung_process() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen([sys.executable, "-c", HUNG_PROGRAM], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "ready\n"
        yield process
    finally:
        process.kill()
        process.wait()


def py_spy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY_SPY, "dump", *args], capture_output=True, text=True, timeout=60)


def waits(dump: ProcessDump) -> dict[str, str]:
    return {thread.name: classify_wait(thread) for thread in dump.threads}


def test_real_dump_text(hung_process: subprocess.Popen) -> None:
    result = py_spy("--pid", str(hung_process.pid))
    assert result.returncode == 0, result.stderr
    (dump,) = parse_dump_text(result.stdout)
    assert dump.pid == hung_process.pid
    assert dump.python_version == ".".join(map(str, sys.version_info[:3]))
    assert waits(dump) == {
        "MainThread": "queue get",
        "EventWaiter": "lock/condition wait",
        "Sleeper": "unknown",  # time.sleep is a C call: invisible without --native
        "Reader": "unknown",
        "Worker-0": "queue get",
        "Worker-1": "queue get",
        "Worker-2": "queue get",
    }
    assert len(dump.threads) == 7
    counts = [count for count, _ in group_identical(dump.threads)]
    assert counts[0] == 3 and sum(counts) == 7


def test_real_dump_native(hung_process: subprocess.Popen) -> None:
    result = py_spy("--pid", str(hung_process.pid), "--native")
    assert result.returncode == 0, result.stderr
    (dump,) = parse_dump_text(result.stdout)
    found = waits(dump)
    assert found["Sleeper"] == "sleep"
    assert found["Reader"] == "I/O"
    assert found["MainThread"] == "queue get"
    assert any(frame.native for thread in dump.threads for frame in thread.frames)


def test_real_dump_json_and_locals_agree_with_text(hung_process: subprocess.Popen) -> None:
    text = parse_dump_text(py_spy("--pid", str(hung_process.pid)).stdout)[0]
    (as_json,) = parse_dump_json(py_spy("--pid", str(hung_process.pid), "--json").stdout)
    assert waits(as_json) == waits(text)
    (with_locals,) = parse_dump_text(py_spy("--pid", str(hung_process.pid), "--locals").stdout)
    main = next(thread for thread in with_locals.threads if thread.name == "MainThread")
    get = next(frame for frame in main.frames if frame.function == "Queue.get")
    assert LocalVariable("block", "True", True) in get.locals


def test_real_failures_are_classified() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    result = py_spy("--pid", str(gone.pid))
    assert classify_error(result.stderr, result.returncode)[0] == "no_such_process"

    not_python = subprocess.Popen(["sleep", "60"])
    try:
        result = py_spy("--pid", str(not_python.pid))
        assert classify_error(result.stderr, result.returncode)[0] == "unsupported_python"
    finally:
        not_python.kill()
        not_python.wait()

    missing = subprocess.run(["bash", "-c", "py-spy-not-installed dump --pid 1"], capture_output=True, text=True)
    assert classify_error(missing.stderr, missing.returncode)[0] == "not_found"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to another user")
def test_real_permission_denied(hung_process: subprocess.Popen) -> None:
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PY_SPY, "dump", "--pid", str(hung_process.pid)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert classify_error(result.stderr, result.returncode)[0] == "permission_denied"
