"""Audit before acting (issue 11, rows 11-12), each case in its own PID namespace.

A "started" record (plan, PIDs, command) is in the audit log before the first signal; a
signal to Pulse mid-action leaves an "interrupted at step X" record; an audit log that
cannot be written refuses the action up front in one line, and only --no-audit runs it.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.safety.namespace import IGNORE_SIGTERM, Scene, alive, in_namespace, pids_with

# -- row 11: a signal to Pulse after SIGTERM went to the run ------------------------------------


def scene_signal_mid_restart(folder: str, signal_name: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run(IGNORE_SIGTERM)  # the stop waits out its grace: Pulse is mid-action
    pulse = scene.pulse_process("restart", *scene.flags(), "--yes", "--grace", "30")
    before = []
    for line in pulse.stdout:
        before.append(line)
        if line.startswith("[....] stop: SIGTERM to"):
            break
    audit_at_signal = scene.audit()
    pulse.send_signal(signal.Signals[signal_name])
    out, err = pulse.communicate(timeout=30)
    return {
        "rc": pulse.returncode,
        "out": "".join(before) + out,
        "err": err,
        "run": run.pid,
        "audit_at_signal": audit_at_signal,
        "audit": scene.audit(),
        "new_logs": scene.new_logs(),
    }


@pytest.mark.parametrize("signal_name", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_a_signal_mid_restart_leaves_started_and_interrupted_records(signal_name, tmp_path):
    seen = in_namespace(scene_signal_mid_restart, folder=str(tmp_path), signal_name=signal_name)
    assert seen["rc"] == 128 + signal.Signals[signal_name].value, seen
    assert f"restart: interrupted by {signal_name}" in seen["err"]
    # the started record was there before Pulse was signalled, i.e. before its SIGTERM to the run
    [started] = seen["audit_at_signal"]
    assert started["record"] == "started"
    assert [p["pid"] for p in started["plan"]["processes"]] == [seen["run"]]
    assert "healthy.py" in started["plan"]["launch"]
    assert [e["record"] for e in seen["audit"]] == ["started", "interrupted"]
    assert seen["audit"][-1]["outcome"] == f"interrupted at step stop ({signal_name})"
    assert seen["new_logs"] == []  # nothing launched


# -- row 12: an audit log that cannot be written ---------------------------------------------------


def scene_unwritable_audit(folder: str, how: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    if how == "a folder in its place":
        scene.audit_path.mkdir(parents=True)
    else:
        scene.audit_path.parent.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(scene.audit_path.parent)], check=True)
    refused = scene.pulse("restart", *scene.flags(), "--yes")
    run_alive_after_refusal = alive(run.pid)
    unaudited = scene.pulse("restart", *scene.flags(), "--yes", "--no-audit")
    return {
        "refused": refused,
        "run_alive_after_refusal": run_alive_after_refusal,
        "unaudited": unaudited,
        "run_alive": alive(run.pid),
        "runs": pids_with(scene.tag),
        "audit_path": str(scene.audit_path),
    }


@pytest.mark.parametrize("how", ["a folder in its place", "a read-only mount"])
def test_an_unwritable_audit_log_refuses_up_front_and_only_no_audit_runs(how, tmp_path):
    seen = in_namespace(scene_unwritable_audit, folder=str(tmp_path), how=how)
    refused, unaudited = seen["refused"], seen["unaudited"]
    why = "Is a directory" if how == "a folder in its place" else "Read-only file system"
    assert refused["rc"] == 2 and refused["out"] == ""
    assert refused["err"] == (
        f"restart: audit log {seen['audit_path']} cannot be written ({why}): restart refused;"
        " --no-audit runs it without a record\n"
    )
    assert seen["run_alive_after_refusal"]
    assert unaudited["rc"] == 0, unaudited
    assert "[WARN] audit: no audit record of this restart (--no-audit)" in unaudited["out"].splitlines()
    assert not seen["run_alive"] and len(seen["runs"]) == 1


def scene_unwritable_audit_warmup(folder: str) -> dict:
    scene = Scene(folder)
    marker = scene.folder / "warmed"
    config = scene.folder / "warmup.toml"
    config.write_text(f'[warmup]\ncommand = "echo {{gpu}} {{seq_len}} >> {marker}"\ngpus = [0]\nseq_lens = [8]\n')
    scene.audit_path.mkdir(parents=True)
    refused = scene.pulse("warmup", str(config), "--yes")
    ran_when_refused = marker.exists()
    unaudited = scene.pulse("warmup", str(config), "--yes", "--no-audit")
    return {"refused": refused, "ran_when_refused": ran_when_refused, "unaudited": unaudited,
            "warmed": marker.read_text() if marker.exists() else ""}


def test_warmup_too_is_refused_up_front_and_runs_only_with_no_audit(tmp_path):
    seen = in_namespace(scene_unwritable_audit_warmup, folder=str(tmp_path))
    assert seen["refused"]["rc"] == 2 and not seen["ran_when_refused"]
    assert seen["refused"]["err"].startswith("warmup: audit log ") and "warmup refused" in seen["refused"]["err"]
    assert seen["unaudited"]["rc"] == 0, seen["unaudited"]
    assert "[WARN] audit: no audit record of this warmup (--no-audit)" in seen["unaudited"]["out"]
    assert seen["warmed"] == "0 8\n"
