"""Alerts: the policy's hysteresis and rate limit, and deliveries to a real HTTP server and real commands."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from console.alerts import Alerter, AlertPolicy, CommandSink, TerminalSink, WebhookSink, alert_object, sinks_for
from console.config import AlertsConfig, Config, RunConfig, TargetConfig
from console.diagnose import Verdict
from console.journal.store import Journal

PCT = Path(__file__).resolve().parent / "bin" / "pct"
HUNG = Verdict("hung", "alive but idle and silent for 312 s", ["pid 447 CPU 0.0%", "log silent 312 s"], "dump its stacks", "dump")
HEALTHY = Verdict("healthy", "the run is alive and its log progresses", [], "nothing to do", None)
SLOW = Verdict("slow", "throughput 60% of baseline", ["5,000 tok/s against 14,200"], "dump its stacks", "dump")


def policy(**overrides) -> AlertPolicy:
    return AlertPolicy(**{"hold_s": 30, "recover_s": 60, "min_interval_s": 300, **overrides})


def test_a_worse_verdict_is_announced_once_it_held_for_hold_s():
    p = policy()
    assert [p.observe("healthy", t) for t in (0, 10, 40)] == [None, None, None]  # a healthy start is no news
    assert p.observe("hung", 50) is None
    assert p.observe("hung", 79) is None
    assert p.observe("hung", 80) == "worse"
    assert p.observe("hung", 85) is None  # said once


def test_a_flapping_link_does_not_page():
    p = policy()
    p.observe("healthy", 0)
    p.observe("healthy", 30)
    events = [p.observe("unknown" if i % 2 else "healthy", 40 + 20 * i) for i in range(30)]
    assert events == [None] * 30


def test_recovery_is_announced_after_recover_s_and_the_rate_limit_holds_back_but_does_not_lose():
    p = policy(min_interval_s=300)
    p.observe("healthy", 0)
    p.observe("healthy", 30)
    assert p.observe("slow", 40) is None
    assert p.observe("slow", 70) == "worse"
    assert p.observe("healthy", 100) is None
    assert p.observe("healthy", 160) is None  # recovered for 60 s, but only 90 s since the last alert
    assert p.observe("healthy", 369) is None
    assert p.observe("healthy", 370) == "recovered"  # the interval ended: announced then


def test_a_milder_problem_is_not_announced_but_a_later_recovery_is():
    p = policy(min_interval_s=0)
    p.observe("hung", 0)
    assert p.observe("hung", 30) == "worse"
    assert p.observe("slow", 40) is None
    assert p.observe("slow", 70) is None
    assert p.announced == "slow"
    p.observe("healthy", 80)
    assert p.observe("healthy", 140) == "recovered"


# -- deliveries -------------------------------------------------------------------------------


class Receiver(BaseHTTPRequestHandler):
    """Records each POST; answers by the path: /ok 200, /fail 500, /hang never."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.received.append((self.path, body))
        if self.path == "/hang":
            self.server.release.wait(30)
            return
        self.send_response(200 if self.path == "/ok" else 500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    httpd.received = []
    httpd.release = threading.Event()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.release.set()
    httpd.shutdown()
    httpd.server_close()


def config(**alerts) -> Config:
    return Config(target=TargetConfig(host="root@gpu1"), run=RunConfig(name="train"),
                  alerts=AlertsConfig(hold_s=0, recover_s=0, min_interval_s=0, **alerts))


@pytest.fixture
def journal(tmp_path):
    j = Journal(tmp_path / "run.sqlite3")
    j.take_lease()
    yield j
    j.close()


def deliveries(journal: Journal) -> list[str]:
    journal.flush()
    return [e.text for e in journal.entries(kinds=("alert",)) if "sink" in e.data]


async def test_a_webhook_gets_the_alert_and_a_failing_one_is_retried_then_journaled(server, journal):
    base = f"http://127.0.0.1:{server.server_port}"
    cfg = config(timeout_s=5, retries=2)
    alerter = Alerter(cfg, [WebhookSink(f"{base}/ok", "json", 5, 2), WebhookSink(f"{base}/fail", "slack", 5, 2)], journal)
    alerter.observe(HUNG)
    await alerter.drain(30)
    ok = [body for path, body in server.received if path == "/ok"]
    assert ok == [{**alert_object("worse", HUNG, None, cfg, ok[0]["time"])}]
    assert ok[0]["host"] == "root@gpu1" and ok[0]["run"] == "train" and ok[0]["evidence"] == HUNG.evidence
    failed = [body for path, body in server.received if path == "/fail"]
    assert len(failed) == 3 and set(failed[0]) == {"text"} and "HUNG" in failed[0]["text"]
    texts = deliveries(journal)
    assert "webhook: HTTP 200 after 1 attempt" in texts
    assert "webhook: delivery failed: HTTP 500 (3 attempts)" in texts


async def test_a_hanging_webhook_times_out_without_holding_up_the_monitor(server, journal):
    base = f"http://127.0.0.1:{server.server_port}"
    command_sink = CommandSink("cat > /dev/null", 5)
    alerter = Alerter(config(timeout_s=0.5, retries=0), [WebhookSink(f"{base}/hang", "json", 0.5, 0), command_sink], journal)
    alerter.observe(HUNG)  # returns at once: deliveries are tasks
    assert len(alerter._tasks) == 2
    await alerter.drain(30)
    assert "webhook: delivery failed: no answer within 0.5 s (1 attempt)" in deliveries(journal)
    assert "command: command ran" in deliveries(journal)


async def test_a_command_gets_the_alert_on_stdin_and_in_its_environment(tmp_path, journal):
    out = tmp_path / "alert"
    command = f'cat > {out}.json; printf "%s|%s|%s" "$PULSE_ALERT_EVENT" "$PULSE_ALERT_VERDICT" "$PULSE_ALERT_EVIDENCE" > {out}.env'
    alerter = Alerter(config(), sinks_for(config(command=command).alerts, None), journal)
    alerter.observe(SLOW)
    await alerter.drain(30)
    alerter.observe(HEALTHY)
    await alerter.drain(30)
    sent = json.loads(Path(f"{out}.json").read_text())
    assert sent["event"] == "recovered" and sent["verdict"] == "healthy" and sent["previous"] == "slow"
    assert Path(f"{out}.env").read_text() == "recovered|healthy|"
    assert deliveries(journal) == ["command: command ran", "command: command ran"]


async def test_a_failing_command_and_a_hanging_one_are_journaled_and_the_hanging_one_is_killed(journal, pid_namespace):
    hanging = f"{PCT} exec {pid_namespace.id} -- sleep 30"
    alerter = Alerter(config(), [CommandSink("echo no route to pager >&2; exit 3", 5), CommandSink(hanging, 0.5)], journal)
    alerter.observe(HUNG)
    await alerter.drain(30)
    texts = deliveries(journal)
    assert "command: delivery failed: command exited with 3: no route to pager" in texts
    assert "command: delivery failed: command did not finish within 0.5 s; killed" in texts
    inside = (await asyncio.create_subprocess_exec(str(PCT), "exec", pid_namespace.id, "--", "ps", "-eo", "args",
                                                   stdout=asyncio.subprocess.PIPE)).stdout
    assert b"sleep 30" not in await inside.read()  # the sink's whole process group went


async def test_the_terminal_gets_a_bell_and_both_desktop_notifications_with_log_text_made_inert(journal):
    written = []
    alerter = Alerter(config(), [TerminalSink(written.append)], journal)
    alerter.observe(replace(HUNG, summary="stuck \x1b]0;pwned\x07 here"))
    await alerter.drain(5)
    (text,) = written
    assert text.startswith("\a\x1b]9;Pulse: train hung: stuck  ]0,pwned  here\x1b\\")
    assert "\x1b]777;notify;Pulse: train hung;stuck  ]0,pwned  here\x1b\\" in text


async def test_only_the_lease_holder_alerts(tmp_path):
    path = tmp_path / "run.sqlite3"
    first, second = Journal(path), Journal(path)
    first.take_lease()
    second.take_lease()
    sent = []
    for journal in (first, second):
        alerter = Alerter(config(), [TerminalSink(sent.append)], journal)
        alerter.observe(HUNG, speak=journal.leader)
        await alerter.drain(5)
    assert len(sent) == 1
    first.close()
    second.close()
