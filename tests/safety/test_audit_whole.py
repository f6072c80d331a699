"""Issue 30 row U7: an audit record is written whole, or the action does not run.

U7 was the audit log on a nearly full filesystem: the warmup ran, exit 0, with a `[WARN]`, and
the log kept a truncated `{"record": "started", …` with no newline (a short write, unchecked).
Here the short writes are real: a tmpfs of a few pages mounted over the audit log's folder in
the scene's own mount namespace, and RLIMIT_FSIZE set in the `pulse` process. The action is
refused before it acts, the log keeps exactly the bytes it had (every record parses), and a
filesystem with no room at all refuses up front like an unwritable log. U+2028 and the other
line separators in a run's argv come back from `records()` as they were written.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys

from console.actions.audit import AuditLog
from tests.safety.namespace import HEALTHY, Scene, alive, in_namespace, pids_with, wait_for

PAGE = 4096
#: Every character a reader could take for a line end; a record holds them only escaped.
LINE_ENDS = "\u2028\u2029\x85\x0b\x0c\x1c\x1d\x1e\r"


def tiny_audit_folder(scene: Scene, free_pages: int) -> AuditLog:
    """The audit log's folder on a tmpfs of 16 pages holding one record, filled up to `free_pages` pages."""
    folder = scene.audit_path.parent
    folder.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={16 * PAGE}", "tmpfs", str(folder)], check=True)
    log = AuditLog(scene.audit_path)
    log.record("restart", "local", {"launch": "python3 train.py"}, [], "ok: new run PID 41 alive")
    fillers = []
    while True:
        filler = folder / f"filler-{len(fillers)}"
        try:
            filler.write_bytes(b"x" * PAGE)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            filler.unlink()
            break
        fillers.append(filler)
    for filler in fillers[:free_pages]:
        filler.unlink()
    return log


def warmup_config(scene: Scene, steps: int) -> tuple[str, str]:
    marker = scene.folder / "warmed"
    config = scene.folder / "warmup.toml"
    config.write_text(f'[warmup]\ncommand = "echo {{gpu}} {{seq_len}} >> {marker}"\n'
                      f"gpus = [0, 1, 2, 3]\nseq_lens = {list(range(1, steps // 4 + 1))}\n")
    return str(config), str(marker)


def scene_nearly_full(folder: str, free_pages: int) -> dict:
    scene = Scene(folder)
    log = tiny_audit_folder(scene, free_pages)
    before = scene.audit_path.read_bytes()
    config, marker = warmup_config(scene, steps=200)  # its "started" record: far more than the room left
    fs = os.statvfs(scene.audit_path)
    seen = scene.pulse("warmup", config, "--yes")
    return {"warmup": seen, "free_bytes": fs.f_bfree * fs.f_frsize, "before": before.decode(),
            "after": scene.audit_path.read_bytes().decode(), "records": log.records(),
            "warmed": os.path.exists(marker), "audit_path": str(scene.audit_path)}


def test_a_short_write_refuses_the_warmup_and_leaves_the_log_as_it_was(tmp_path):
    seen = in_namespace(scene_nearly_full, folder=str(tmp_path), free_pages=1)
    assert 0 < seen["free_bytes"] <= PAGE  # room for part of the record, not all of it
    warmup = seen["warmup"]
    assert warmup["rc"] == 2, warmup
    assert not seen["warmed"], "the warmup ran without its started record"
    [line] = warmup["err"].splitlines()
    assert line.startswith(f"warmup: audit log {seen['audit_path']} cannot be written (short write, ")
    assert line.endswith(" bytes; the partial record was removed): warmup refused; --no-audit runs it without a record")
    assert "[WARN]" not in warmup["out"]
    assert seen["after"] == seen["before"] and seen["after"].endswith("\n")
    assert [r["record"] for r in seen["records"]] == ["finished"]


def test_a_full_filesystem_refuses_up_front(tmp_path):
    seen = in_namespace(scene_nearly_full, folder=str(tmp_path), free_pages=0)
    assert seen["free_bytes"] == 0
    warmup = seen["warmup"]
    assert warmup["rc"] == 2 and warmup["out"] == ""  # refused before the plan was even made
    assert warmup["err"] == (f"warmup: audit log {seen['audit_path']} cannot be written (No space left on device):"
                             " warmup refused; --no-audit runs it without a record\n")
    assert not seen["warmed"] and seen["after"] == seen["before"]


def scene_file_size_limit(folder: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    log = AuditLog(scene.audit_path)
    log.record("warmup", "local", {"steps": []}, [], "ok")
    before = scene.audit_path.read_bytes()
    limit = len(before) + 100  # part of the restart's "started" record fits, not all of it

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    seen = scene.pulse("restart", *scene.flags(), "--yes", preexec_fn=limited)
    return {"restart": seen, "run_alive": alive(run.pid), "runs": pids_with(scene.tag), "new_logs": scene.new_logs(),
            "before": before.decode(), "after": scene.audit_path.read_bytes().decode(), "records": log.records()}


def test_a_short_write_under_a_file_size_limit_refuses_the_restart_before_its_stop(tmp_path):
    seen = in_namespace(scene_file_size_limit, folder=str(tmp_path))
    restart = seen["restart"]
    assert restart["rc"] == 2, restart
    [line] = restart["err"].splitlines()
    assert "cannot be written (short write, 100 of " in line and line.endswith(": restart refused; --no-audit runs it without a record")
    assert "[....] stop" not in restart["out"]
    assert seen["run_alive"] and len(seen["runs"]) == 1 and seen["new_logs"] == []
    assert seen["after"] == seen["before"]
    assert [r["action"] for r in seen["records"]] == ["warmup"]


def scene_line_ends_in_argv(folder: str) -> dict:
    scene = Scene(folder)
    note = "note\u2028mid\u2029end"  # what the issue saw survive into the audit log
    with open(scene.old_log, "ab") as out:
        run = scene.start([sys.executable, "-u", str(HEALTHY), "--tag", scene.tag, "--interval", "0.05", note], stdout=out)
    wait_for(lambda: scene.old_log.stat().st_size, "the run to start")
    seen = scene.pulse("restart", *scene.flags(), "--yes")
    raw = scene.audit_path.read_bytes()
    return {"restart": seen, "run": run.pid, "note": note, "records": scene.audit(), "raw": raw.decode("latin-1")}


def test_line_separators_in_a_runs_argv_round_trip_through_the_audit_log(tmp_path):
    seen = in_namespace(scene_line_ends_in_argv, folder=str(tmp_path))
    assert seen["restart"]["rc"] == 0, seen["restart"]
    assert [r["record"] for r in seen["records"]] == ["started", "finished"]
    [planned] = seen["records"][0]["plan"]["processes"]
    assert planned["pid"] == seen["run"] and "\u2028" in planned["cmdline"] and "\u2029" in planned["cmdline"]
    raw = seen["raw"]
    assert raw.isascii() and raw.count("\n") == 2 and raw.endswith("\n")  # one line per record, however it is split
    assert "\\u2028" in raw


def test_every_line_end_round_trips_and_a_torn_last_line_is_cut(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    plan = {"argv": ["python3", f"a{LINE_ENDS}b", "ünï ✓"]}
    log.record("restart", "local", plan, [], f"ok{LINE_ENDS}")
    with open(log.path, "ab") as torn:  # what a crash in the middle of a record leaves
        torn.write(b'{"record": "started", "time": 1')
    [entry] = log.records()  # the unterminated last line is no record
    assert entry["plan"] == plan and entry["outcome"] == f"ok{LINE_ENDS}"
    log.record("warmup", "local", {}, [], "ok")
    assert [r["action"] for r in log.records()] == ["restart", "warmup"]
    text = log.path.read_text()
    assert text.isascii() and text.endswith("\n")
    assert [json.loads(line)["action"] for line in text.split("\n")[:-1]] == ["restart", "warmup"]  # the torn bytes are gone
