"""The audit log: append-only JSON lines, private to its owner, one entry per action."""

from __future__ import annotations

import json
import os
import stat

import pytest

from console.actions.audit import (
    ActionRefused,
    AuditLog,
    StepEvent,
    StepStatus,
    refuse_if_read_only,
)


def test_record_creates_parents_private_and_appends(tmp_path):
    path = tmp_path / "state" / "pulse" / "audit.jsonl"
    log = AuditLog(path)
    steps = [
        StepEvent("stop", StepStatus.RUNNING, "SIGTERM to group 41"),
        StepEvent("stop", StepStatus.OK, "1 process stopped"),
        StepEvent("launch", StepStatus.FAILED, "exit 127"),
    ]
    log.record("restart", "root@gpu1", {"pids": [41]}, steps, "failed: launch", container="pct 200")
    log.record("warmup", "root@gpu1", {"commands": []}, [], "ok")

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["action"] == "restart"
    assert first["host"] == "root@gpu1"
    assert first["container"] == "pct 200"
    assert first["plan"] == {"pids": [41]}
    assert first["outcome"] == "failed: launch"
    # only the result of each step is kept, not its "running" announcement
    assert [(s["step"], s["status"]) for s in first["steps"]] == [("stop", "ok"), ("launch", "failed")]
    assert isinstance(first["time"], float)
    assert [entry["action"] for entry in log.entries()] == ["restart", "warmup"]


def test_hostile_text_stays_one_json_line(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.record("custom:tail", "h", {"command": "tail -f 'x\n; rm -rf ~'"}, [], "ok\nforged line")
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["outcome"] == "ok\nforged line"


def test_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    log = AuditLog("~/audit/a.jsonl")
    log.record("restart", "local", {}, [], "ok")
    assert (tmp_path / "audit" / "a.jsonl").exists()


def test_read_only_refusal_names_the_action():
    refuse_if_read_only("restart", False)
    with pytest.raises(ActionRefused, match=r"^read-only: restart disabled \(started with --read-only\)$"):
        refuse_if_read_only("restart", True)


def test_entries_are_how_actions_ended_records_include_the_started_ones(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.record("restart", "h", {"pids": [41]}, [], "started", record="started")
    log.record("restart", "h", {"pids": [41]}, [], "interrupted at step stop (SIGHUP)", record="interrupted")
    assert [r["record"] for r in log.records()] == ["started", "interrupted"]
    [entry] = log.entries()
    assert entry["outcome"] == "interrupted at step stop (SIGHUP)"


def test_an_unwritable_log_says_why_and_the_check_creates_nothing(tmp_path):
    assert AuditLog(tmp_path / "new" / "audit.jsonl").unwritable() is None
    assert not (tmp_path / "new").exists()
    (tmp_path / "folder.jsonl").mkdir()
    assert AuditLog(tmp_path / "folder.jsonl").unwritable() == "Is a directory"
    os.mkfifo(tmp_path / "fifo.jsonl")  # nobody reads it: a blocking open would hang here
    assert AuditLog(tmp_path / "fifo.jsonl").unwritable() == "No such device or address"
    (tmp_path / "file").write_text("")
    assert AuditLog(tmp_path / "file" / "audit.jsonl").unwritable() == f"{tmp_path / 'file'} is not a folder"
    with pytest.raises(OSError):
        AuditLog(tmp_path / "fifo.jsonl").record("restart", "h", {}, [], "ok")


def test_a_failing_listener_never_fails_the_record(tmp_path):
    """The journal listens to the audit log; its failure must not read as an unwritable audit log."""
    told = []

    def broken(entry):
        told.append(entry["record"])
        raise OSError("journal disk full")

    log = AuditLog(str(tmp_path / "audit.jsonl"), on_record=broken)
    entry = log.record("restart", "local", {"pids": [1]}, [], "started", record="started")
    assert entry["record"] == "started"
    assert [r["record"] for r in log.records()] == ["started"]
    assert told == ["started"]
