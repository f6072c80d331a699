"""Alerts: tell someone when the run's verdict gets worse, and when it recovers.

`AlertPolicy` (pure) decides, from the stream of verdicts, when to speak:

- hysteresis: a worse verdict must hold for `[alerts] hold_s` (30 s) and a recovery for
  `recover_s` (60 s) before they are announced, so a link that flaps does not page anyone;
- a rate limit: at most one alert per `min_interval_s` (300 s); one held back is not lost:
  when the interval ends the policy looks again and announces the state then, if it still
  differs from the last one announced.

`Alerter` sends each alert to every configured sink at once, each in its own task with
its own timeout, so a sink that fails or hangs never holds up the monitor or the others.
Every alert, and every delivery (sent or failed, with why), is journaled as kind `alert`.
`pulse watch`'s restart policy announces each automatic restart's outcome ("restart") and a
used-up limit ("restart_limit") through the same sinks, at once (`Alerter.announce`).

Sinks:
- terminal: BEL, then OSC 9 (iTerm2, WezTerm, Windows Terminal, kitty) and OSC 777
  (VTE terminals, foot, rxvt) desktop notifications; terminals without them ignore both;
- `[alerts] command`: run with `sh -c`, the alert as one JSON object on stdin and as
  PULSE_ALERT_EVENT, _HOST, _RUN, _VERDICT, _PREVIOUS, _SUMMARY, _EVIDENCE (lines joined by
  newlines), _NEXT_STEP; killed (its process group, which it leads) past `timeout_s`;
- `[alerts] webhook`: a JSON POST through httpx, `timeout_s` per attempt, `retries` more
  attempts after a connection error, a timeout, 429 or a 5xx (0.5 s, 1 s, 2 s apart);
  `webhook_format = "slack"` sends `{"text": …}`, `"discord"` sends `{"content": …}`.

The alert object:

    {"event": "worse" | "recovered" | "restart" | "restart_limit", "time": Unix seconds, "host": …, "container": … | null,
     "run": …, "verdict": …, "previous": … | null, "summary": …, "evidence": [lines],
     "next_step": …, "step": "dump" | "log" | "restart" | "warmup" | "continue" | null}
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from console.backoff import Backoff
from console.config import AlertsConfig, Config
from console.verdicts import severity
from console.journal.recorder import verdict_data
from console.journal.store import Journal

#: Waits between a webhook's attempts (seconds): the first, and the longest.
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 2.0
#: Deliveries one sink may have in flight; past it an alert to that sink is dropped (and journaled).
MAX_IN_FLIGHT = 4


@dataclass
class AlertPolicy:
    """Hysteresis and a rate limit over a stream of verdict names (times in seconds, any clock)."""

    hold_s: float
    recover_s: float
    min_interval_s: float
    announced: str | None = None
    """The verdict the last alert spoke of (None: nothing settled yet)."""
    _candidate: str | None = None
    _since: float = 0.0
    _last_alert_at: float | None = None

    @classmethod
    def from_config(cls, alerts: AlertsConfig) -> AlertPolicy:
        return cls(alerts.hold_s, alerts.recover_s, alerts.min_interval_s)

    def observe(self, name: str, now: float) -> str | None:
        """Feed the current verdict; returns 'worse' or 'recovered' when an alert is due now."""
        if name != self._candidate:
            self._candidate, self._since = name, now
        if name == self.announced:
            return None
        if self.announced is None:
            # The first settled verdict: a problem is news, a healthy start is not.
            if now - self._since < self.hold_s:
                return None
            if name == "healthy":
                self.announced = name
                return None
            return self._speak(name, "worse", now)
        if severity(name) > severity(self.announced):
            return self._speak(name, "worse", now) if now - self._since >= self.hold_s else None
        if name == "healthy":
            return self._speak(name, "recovered", now) if now - self._since >= self.recover_s else None
        if now - self._since >= self.hold_s:
            self.announced = name  # better, but still a problem: no alert; a later recovery is news
        return None

    def _speak(self, name: str, event: str, now: float) -> str | None:
        if self._last_alert_at is not None and now - self._last_alert_at < self.min_interval_s:
            return None  # held back; asked again on the next verdict
        self.announced = name
        self._last_alert_at = now
        return event


def alert_object(event: str, verdict, previous: str | None, config: Config, at: float) -> dict:
    """The alert as sinks receive it (see the module docstring)."""
    target = config.target
    return {
        "event": event,
        "time": at,
        "host": target.host or socket.gethostname(),
        "container": target.container.describe() if target.container else None,
        "run": config.run.name,
        **verdict_data(verdict),
        "previous": previous,
    }


#: How a chat line starts for an alert that is not a problem getting worse.
_HEADS = {"recovered": "recovered", "restart": "automatic restart", "restart_limit": "automatic restarts used up"}


def alert_text(alert: dict) -> str:
    """One paragraph for a chat channel or a notification."""
    where = alert["host"] + (f" ({alert['container']})" if alert["container"] else "")
    head = _HEADS.get(alert["event"], alert["verdict"].upper())
    lines = [f"Pulse · {alert['run']} on {where}: {head}: {alert['summary']}"]
    lines += [f"• {line}" for line in alert["evidence"]]
    if alert["event"] != "recovered":
        lines.append(f"Next: {alert['next_step']}")
    return "\n".join(lines)


class DeliveryError(Exception):
    """A sink could not deliver: one line saying why."""


# -- sinks -----------------------------------------------------------------------------------


def _osc_safe(text: str) -> str:
    """Text for inside an OSC string: no control characters (ESC or BEL would end it early), no ';'."""
    return "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in text).replace(";", ",")[:200]


class TerminalSink:
    """BEL and desktop notifications (OSC 9 and OSC 777) written to a terminal."""

    name = "terminal"

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write

    async def deliver(self, alert: dict) -> str:
        title = _osc_safe(f"Pulse: {alert['run']} {alert['verdict']}")
        body = _osc_safe(alert["summary"])
        self.write(f"\a\x1b]9;{title}: {body}\x1b\\\x1b]777;notify;{title};{body}\x1b\\")
        return "bell and notification written"


def tty_writer(stream: TextIO) -> Callable[[str], None] | None:
    """A writer for `stream` when it is a terminal (notifications mean nothing in a file)."""
    if not stream.isatty():
        return None

    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write


class CommandSink:
    """`sh -c COMMAND` with the alert as JSON on stdin and in PULSE_ALERT_* variables."""

    name = "command"

    def __init__(self, command: str, timeout_s: float) -> None:
        self.command = command
        self.timeout_s = timeout_s

    async def deliver(self, alert: dict) -> str:
        env = dict(os.environ)
        for key in ("event", "host", "run", "verdict", "previous", "summary", "next_step"):
            env[f"PULSE_ALERT_{key.upper()}"] = str(alert[key] or "")
        env["PULSE_ALERT_EVIDENCE"] = "\n".join(alert["evidence"])
        process = await asyncio.create_subprocess_exec(
            "sh", "-c", self.command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env=env, start_new_session=True,
        )
        try:
            async with asyncio.timeout(self.timeout_s):
                _, stderr = await process.communicate(json.dumps(alert).encode())
        except asyncio.TimeoutError:
            await _kill_group(process)
            raise DeliveryError(f"command did not finish within {self.timeout_s:g} s; killed") from None
        except asyncio.CancelledError:
            await _kill_group(process)
            raise
        if process.returncode != 0:
            tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise DeliveryError(f"command exited with {process.returncode}{': ' + tail[0][:200] if tail[0] else ''}")
        return "command ran"


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    """The command leads its own process group (start_new_session): end what it started with it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # it and its group ended meanwhile
        pass
    await process.wait()


class WebhookSink:
    """A JSON POST with retries and a timeout per attempt."""

    name = "webhook"

    def __init__(self, url: str, body_format: str, timeout_s: float, retries: int) -> None:
        self.url = url
        self.body_format = body_format
        self.timeout_s = timeout_s
        self.retries = retries

    def body(self, alert: dict) -> dict:
        if self.body_format == "slack":
            return {"text": alert_text(alert)}
        if self.body_format == "discord":
            return {"content": alert_text(alert)[:2000]}
        return alert

    async def deliver(self, alert: dict) -> str:
        import httpx

        body = self.body(alert)
        why = ""
        async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as client:
            backoff = Backoff(RETRY_FIRST_S, RETRY_MAX_S)
            for attempt in range(self.retries + 1):
                if attempt:
                    await asyncio.sleep(backoff.next())
                try:
                    response = await client.post(self.url, json=body)
                except httpx.TimeoutException:
                    why = f"no answer within {self.timeout_s:g} s"
                    continue
                except httpx.HTTPError as exc:
                    why = f"{type(exc).__name__}: {exc}"
                    continue
                if response.is_success:
                    return f"HTTP {response.status_code} after {attempt + 1} attempt{'s' * (attempt > 0)}"
                why = f"HTTP {response.status_code}"
                if response.status_code != 429 and response.status_code < 500:
                    break  # the request itself is wrong: asking again will not help
        raise DeliveryError(f"{why} ({attempt + 1} attempt{'s' * (attempt > 0)})")


def sinks_for(alerts: AlertsConfig, terminal_write: Callable[[str], None] | None) -> list:
    """The sinks `[alerts]` asks for (the terminal one only where there is a terminal to write to)."""
    sinks: list = []
    if alerts.terminal and terminal_write is not None:
        sinks.append(TerminalSink(terminal_write))
    if alerts.command:
        sinks.append(CommandSink(alerts.command, alerts.timeout_s))
    if alerts.webhook:
        sinks.append(WebhookSink(alerts.webhook, alerts.webhook_format, alerts.timeout_s, alerts.retries))
    return sinks


class Alerter:
    """Feeds verdicts to the policy and delivers due alerts in background tasks, journaling each."""

    def __init__(self, config: Config, sinks: list, journal: Journal, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.sinks = sinks
        self.journal = journal
        self.clock = clock
        self.policy = AlertPolicy.from_config(config.alerts)
        self.sent: list[dict] = []
        """Alerts decided so far (their deliveries may still run)."""
        self._tasks: set[asyncio.Task] = set()
        self._in_flight = {sink: 0 for sink in sinks}

    def observe(self, verdict, *, speak: bool = True) -> dict | None:
        """Feed the current verdict; start delivering an alert when one is due. Never waits.

        `speak=False` (another writer holds the journal's lease and alerts) keeps the policy
        current without sending anything."""
        previous = self.policy.announced
        now = self.clock()
        event = self.policy.observe(verdict.name, now)
        if event is None or not speak:
            return None
        return self._send(alert_object(event, verdict, previous, self.config, now))

    def announce(self, event: str, verdict, summary: str, next_step: str) -> dict:
        """Send an alert that is no change of verdict (`pulse watch`'s automatic restarts: "restart",
        "restart_limit"): at once, past the hysteresis and the rate limit, which are for verdicts."""
        alert = alert_object(event, verdict, self.policy.announced, self.config, self.clock())
        return self._send({**alert, "summary": summary, "next_step": next_step})

    def _send(self, alert: dict) -> dict:
        self.sent.append(alert)
        self._journal(f"{alert['event']}: {alert['verdict']}: {alert['summary']}", {"alert": alert})
        for sink in self.sinks:
            if self._in_flight[sink] >= MAX_IN_FLIGHT:
                self._journal(f"{sink.name}: not sent: {MAX_IN_FLIGHT} deliveries still running", {"sink": sink.name, "ok": False})
                continue
            self._in_flight[sink] += 1
            task = asyncio.create_task(self._deliver(sink, alert), name=f"pulse alert to {sink.name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return alert

    async def _deliver(self, sink, alert: dict) -> None:
        try:
            # The sink's own timeout comes first; this bounds a sink that ignores it.
            async with asyncio.timeout(self.config.alerts.timeout_s * (self.config.alerts.retries + 2)):
                detail = await sink.deliver(alert)
            self._journal(f"{sink.name}: {detail}", {"sink": sink.name, "ok": True, "event": alert["event"]})
        except DeliveryError as exc:
            self._journal(f"{sink.name}: delivery failed: {exc}", {"sink": sink.name, "ok": False, "event": alert["event"]})
        except asyncio.TimeoutError:
            self._journal(f"{sink.name}: delivery failed: gave up waiting", {"sink": sink.name, "ok": False, "event": alert["event"]})
        except OSError as exc:
            self._journal(f"{sink.name}: delivery failed: {exc}", {"sink": sink.name, "ok": False, "event": alert["event"]})
        finally:
            self._in_flight[sink] -= 1

    def _journal(self, text: str, data: dict) -> None:
        self.journal.add("alert", text, data)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for deliveries still running (before a clean exit), then cancel them."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
