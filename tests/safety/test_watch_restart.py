"""`pulse watch --restart-on` (issue 37): the restart policy on real runs, each case in its own PID namespace.

The run is tests/procs/healthy.py with --steps: a few step lines, then it waits forever, idle: the
real diagnosis judges it hung from its stacks. Its launch starts the same program, so the new run
hangs again. The watch is the real CLI (tests/safety/bin/pulse: the restart's waits shortened).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from console.config import load_config
from console.journal.store import JournalError, journal_path, open_for_reading, read_entries
from tests.safety.namespace import HEALTHY, SCENE_LIMIT_S, Scene, alive, in_namespace, pids_with
from tests.safety.test_gpu_holders import STAND_IN
from tests.sshd import start_sshd
from tests.test_restart import wait_for

#: Step lines each run writes before it hangs.
STEPS = 3


def hang_launch(scene: Scene) -> str:
    return f"{sys.executable} -u {HEALTHY} --tag {scene.tag} --interval 0.05 --steps {STEPS}"


def watch_config(scene: Scene, name: str = "watch.toml", *, max_restarts: int = 1, gpus: bool = False,
                 stall_after_s: float | None = None) -> str:
    """A config for the hanging run: the policy restarts on hung after 1 s, the hang judged on the default
    path (its stall limit from its own rhythm) unless `stall_after_s` sets `[stall] log_silent_s`, every
    alert appended to alerts.jsonl at once; with `gpus`, the demo's nvidia-smi answers for 8 idle H200s."""
    config = scene.folder / name
    state = scene.folder / "gpus.json"
    state.write_text('{"holders": []}')
    config.write_text(
        (f'[target]\nnvidia_smi = "{sys.executable} {STAND_IN} --state {state}"\n[gpus]\nsource = "nvidia-smi"\n'
         if gpus else "")
        + f'[run]\nname = "train"\nlaunch = "{hang_launch(scene)}"\nmatch = "{scene.tag}"\n'
        f'log = "{scene.folder}/{scene.tag}_{{started}}.log"\npidfile = "{scene.pidfile}"\ngrace_s = 2\n'
        "[stall]\nsample_window_s = 0.5\n"
        + (f"log_silent_s = {stall_after_s:g}\n" if stall_after_s is not None else "")
        + f"[alerts]\nhold_s = 0\nrecover_s = 0\nmin_interval_s = 0\nterminal = false\n"
        f"command = \"cat >> {scene.folder}/alerts.jsonl; echo >> {scene.folder}/alerts.jsonl\"\n"
        f'[watch]\nrestart_on = ["hung"]\nmax_restarts = {max_restarts}\nrestart_after = "1s"\n'
    )
    return str(config)


def start_hung_run(scene: Scene):
    """The first run, hung after STEPS lines, its PID in the pidfile as a launch would leave it."""
    with open(scene.old_log, "ab") as log:
        run = scene.start([sys.executable, "-u", str(HEALTHY), "--tag", scene.tag, "--interval", "0.05",
                           "--steps", str(STEPS)], stdout=log)
    scene.pidfile.write_text(f"{run.pid}\n")
    wait_for(lambda: scene.old_log.read_text().count("step ") >= STEPS, "the run to hang")
    return run


def alerts(scene: Scene) -> list[dict]:
    path = scene.folder / "alerts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def stop_watch(process) -> dict:
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=SCENE_LIMIT_S - 10)
    return {"rc": process.returncode, "out": out, "err": err}


def journal(scene: Scene, config: str) -> dict:
    shown = scene.pulse("journal", config, "--json")
    assert shown["rc"] == 0, shown
    return json.loads(shown["out"])


# -- a hang is restarted once after the wait; the next, past the limit, is alerted and left alone ------


def scene_hang_restarted_once(folder: str) -> dict:
    scene = Scene(folder)
    old = start_hung_run(scene)
    config = watch_config(scene, gpus=True)
    started = time.monotonic()
    watch = scene.pulse_process("watch", config, "--metrics", "127.0.0.1:0")
    said = [watch.stderr.readline(), watch.stderr.readline()]
    endpoint = said[1].rsplit(" ", 1)[-1].strip()
    wait_for(lambda: any(a["event"] == "restart_limit" for a in alerts(scene)), "the second hang to meet the limit", 50)
    took = time.monotonic() - started
    runs = pids_with(scene.tag)
    time.sleep(1.0)  # a few more verdicts: the hung run is left alone
    left_alone = pids_with(scene.tag) == runs and all(alive(pid) for pid in runs)
    with urllib.request.urlopen(endpoint, timeout=10) as response:
        scraped = {"type": response.headers["Content-Type"], "text": response.read().decode()}
    stopped = stop_watch(watch)
    stopped["err"] = "".join(said) + stopped["err"]
    return {"watch": stopped, "took": took, "endpoint": endpoint, "scraped": scraped, "old_alive": alive(old.pid), "runs": runs, "left_alone": left_alone,
            "alerts": alerts(scene), "audit": scene.audit(), "journal": journal(scene, config),
            "journal_text": scene.pulse("journal", config)["out"], "report": scene.pulse("report", config)["out"],
            "pidfile": scene.pidfile.read_text()}


def test_a_hang_is_restarted_once_and_the_next_past_the_limit_is_alerted_and_left_alone(tmp_path):
    seen = in_namespace(scene_hang_restarted_once, folder=str(tmp_path))
    assert seen["watch"]["rc"] == 0, seen["watch"]
    assert not seen["old_alive"]
    assert len(seen["runs"]) == 1 and seen["runs"] == [int(seen["pidfile"])], seen
    assert seen["left_alone"]
    # The restart went through `pulse restart --yes`'s path: started and finished records, verified.
    restarts = [r for r in seen["audit"] if r["action"] == "restart"]
    assert [r["record"] for r in restarts] == ["started", "finished"], restarts
    assert restarts[-1]["outcome"].startswith("ok"), restarts[-1]
    assert [s["step"] for s in restarts[-1]["steps"]][:1] == ["lock"]
    events = [a["event"] for a in seen["alerts"]]
    assert events.count("restart") == 1 and events.count("restart_limit") == 1, events
    restart = next(a for a in seen["alerts"] if a["event"] == "restart")
    assert restart["verdict"] == "hung" and restart["summary"].startswith("automatic restart: restarted: new run PID")
    limit = next(a for a in seen["alerts"] if a["event"] == "restart_limit")
    assert "1 automatic restart in the last 6h 00m already (max 1): not restarting; still watching" in limit["summary"]
    # The journal holds the evidence saved before the restart: every stack, the log's last lines, the GPUs.
    policy = [e for e in seen["journal"]["entries"] if e["kind"] == "policy"]
    assert [e["data"]["event"] for e in policy] == ["restart", "outcome", "limit"], policy
    saved = policy[0]["data"]
    assert saved["verdict"] == "hung" and saved["processes"]
    assert any('thread "MainThread"' in line and "healthy.py" in line for line in saved["stacks"]), saved["stacks"]
    assert saved["log_tail"][-1].startswith(f"step {STEPS} ") and saved["gpus"]
    assert policy[1]["data"]["outcome"] == "restarted"
    # The audit log told the watch's journal of each record it wrote (its on_record listener).
    actions = [e["data"] for e in seen["journal"]["entries"] if e["kind"] == "action"]
    assert [(a["action"], a["record"]) for a in actions] == [("restart", "started"), ("restart", "finished")], actions
    assert "automatic restart 1 of at most 1 in 6h 00m: evidence saved" in seen["journal_text"]
    assert "stacks:" in seen["journal_text"] and "last log lines:" in seen["journal_text"]
    assert "## Automatic restarts and the evidence each saved" in seen["report"]
    assert "- **Automatic restarts:** 1" in seen["report"] and "Outcome (" in seen["report"]
    assert "policy: hung for " in seen["watch"]["out"]
    print(f"hang, restart, hang again, limit: {seen['took']:.1f} s")
    # Its metrics endpoint, scraped over HTTP and read with prometheus_client's own parser.
    assert seen["endpoint"].startswith("http://127.0.0.1:") and seen["endpoint"].endswith("/metrics")
    assert seen["scraped"]["type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(seen["scraped"]["text"]):
        for sample in family.samples:
            labels = dict(sample.labels)
            assert labels.pop("run") == "train" and labels.pop("host") == socket.gethostname(), sample
            samples[(sample.name, tuple(sorted(labels.items())))] = sample.value
    assert samples[("pulse_verdict", (("verdict", "hung"),))] == 1
    assert sum(v for (name, _), v in samples.items() if name == "pulse_verdict") == 1
    assert 0 <= samples[("pulse_verdict_age_seconds", ())] < 30
    assert samples[("pulse_throughput", (("metric", "tokens_per_s"),))] == 14200
    assert samples[("pulse_loss", ())] == 2.31 and samples[("pulse_step", ())] == STEPS
    assert samples[("pulse_link_state", (("state", "connected"),))] == 1
    assert samples[("pulse_restarts_total", ())] == 1
    assert samples[("pulse_alerts_total", ())] == len(seen["alerts"])
    for gpu in range(8):
        one = (("gpu", str(gpu)),)
        assert samples[("pulse_gpu_memory_total_bytes", one)] == 143771 * 2**20
        assert samples[("pulse_gpu_utilization_percent", one)] == 0
        assert samples[("pulse_gpu_power_watts", one)] > 0 and samples[("pulse_gpu_temperature_celsius", one)] > 0


# -- two watches on one run restart it once -------------------------------------------------------


def scene_two_watches(folder: str) -> dict:
    scene = Scene(folder)
    old = start_hung_run(scene)
    # Two operators' watches: a journal each, one audit log (the config names it) to count the restarts.
    config = watch_config(scene)
    Path(config).write_text(f'audit_log = "{scene.audit_path}"\n' + Path(config).read_text())
    watches = []
    for name in ("a", "b"):
        os.environ["XDG_STATE_HOME"] = str(scene.folder / name)
        watches.append(scene.pulse_process("watch", config))

    def decided(name: str) -> list[dict]:
        os.environ["XDG_STATE_HOME"] = str(scene.folder / name)
        try:
            conn = open_for_reading(journal_path(load_config(config)))
        except JournalError:  # not made yet
            return []
        try:
            return [e.data for e in read_entries(conn, kinds=["policy"]) if e.data["event"] in ("outcome", "declined")]
        finally:
            conn.close()

    wait_for(lambda: time.sleep(0.2) or (decided("a") and decided("b")), "both watches to act on the hang", 45)
    outcomes = decided("a") + decided("b")
    runs = pids_with(scene.tag)
    stopped = [stop_watch(w) for w in watches]
    return {"outcomes": outcomes, "runs": runs, "old_alive": alive(old.pid), "audit": scene.audit(),
            "watches": stopped, "pidfile": scene.pidfile.read_text()}


def test_two_watches_on_one_run_restart_it_once(tmp_path):
    seen = in_namespace(scene_two_watches, folder=str(tmp_path))
    assert all(w["rc"] == 0 for w in seen["watches"]), seen["watches"]
    assert not seen["old_alive"] and seen["runs"] == [int(seen["pidfile"])], seen
    words = sorted(o.get("outcome", "declined") for o in seen["outcomes"])
    assert words.count("restarted") == 1 and len(words) == 2, seen["outcomes"]
    other = next(o for o in seen["outcomes"] if o.get("outcome") != "restarted")
    # The other watch found the lock held, the run already restarted, or the new run not hung.
    said = other.get("detail", "")
    assert other["event"] == "declined" or "another restart of this run holds its lock" in said \
        or "the run changed since it was judged" in said, other
    # One restart acted; one that planned before the lock was taken found it held at its lock step, signalling nothing.
    finished = [r for r in seen["audit"] if r["action"] == "restart" and r["record"] == "finished"]
    assert [r["outcome"][:2] for r in finished].count("ok") == 1, finished
    for r in finished:
        if not r["outcome"].startswith("ok"):
            assert r["outcome"].startswith("failed: lock: another restart of this run holds its lock"), r
            assert [s["step"] for s in r["steps"]] == ["lock"], r


# -- an SSH cut during the policy's launch: interrupted, launched once --------------------------------

#: The launch's report held on a FIFO (as tests/faults/test_restart_faults.py does): the process agent
#: has started the run and said so, but its words stay on the target until the link is cut.
HELD_PYTHON = """#!/bin/bash
[ "$6" = launch ] || exec {python} "$@"
said=$({python} "$@"); status=$?
read -r _ < {hold}
printf "%s\\n" "$said"; exit $status
"""


def scene_ssh_cut_during_the_launch(folder: str) -> dict:
    scene = Scene(folder)
    old = start_hung_run(scene)
    (scene.folder / "sshd").mkdir()
    server = start_sshd(scene.folder / "sshd")
    hold = scene.folder / "hold"
    os.mkfifo(hold)
    held_python = scene.folder / "held-python"
    held_python.write_text(HELD_PYTHON.format(python=sys.executable, hold=hold))
    held_python.chmod(0o755)
    config = watch_config(scene, stall_after_s=1)  # what is tested is the cut, not how soon the hang is judged
    # The new run does not hang: after the cut nothing more is due.
    text = Path(config).read_text().replace(f" --steps {STEPS}", "")
    Path(config).write_text(f'[target]\nhost = "{server.alias}"\nssh_config = "{server.ssh_config}"\n'
                            f'known_hosts = "{server.known_hosts}"\npython = "{held_python}"\n' + text)
    try:
        watch = scene.pulse_process("watch", config)
        new = wait_for(lambda: [pid for pid in pids_with(scene.tag) if pid != old.pid], "the new run to start", 45)
        server.kill_connections()
        wait_for(lambda: any(a["event"] == "restart" for a in alerts(scene)), "the restart's outcome", 30)
        time.sleep(1.0)  # the watch goes on: nothing more is launched
        runs = pids_with(scene.tag)
        stopped = stop_watch(watch)
    finally:
        try:
            os.close(os.open(hold, os.O_WRONLY | os.O_NONBLOCK))  # let the held report finish
        except OSError:
            pass
        server.stop()
    return {"new": new, "runs": runs, "old_alive": alive(old.pid), "alerts": alerts(scene), "audit": scene.audit(),
            "watch": stopped, "journal": journal(scene, config)}


def test_an_ssh_cut_during_the_policys_launch_is_interrupted_and_launches_once(tmp_path):
    seen = in_namespace(scene_ssh_cut_during_the_launch, folder=str(tmp_path))
    assert seen["watch"]["rc"] == 0, seen["watch"]
    assert not seen["old_alive"] and seen["runs"] == seen["new"] and len(seen["runs"]) == 1, seen
    restart = next(a for a in seen["alerts"] if a["event"] == "restart")
    assert restart["summary"].startswith("automatic restart: interrupted: launch state unknown"), restart
    assert "the launch happened; do not launch again" in restart["summary"]
    outcome = [e["data"] for e in seen["journal"]["entries"] if e["kind"] == "policy" and e["data"]["event"] == "outcome"]
    assert [o["outcome"] for o in outcome] == ["interrupted"], outcome
    finished = [r for r in seen["audit"] if r["action"] == "restart" and r["record"] == "finished"]
    assert len(finished) == 1 and finished[0]["outcome"].startswith("failed: launch: launch state unknown"), finished
