"""Journal rows as text: `pulse journal` lines, its JSON, and `pulse report`'s Markdown. Pure."""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from console.journal.recorder import GPU_FIGURES
from console.journal.store import Entry, Minute
from console.state import RATE_METRICS, RATE_UNITS
from console.units import format_duration, format_gib, format_indices, parse_duration, spread


def parse_since(text: str) -> float:
    """'90s', '30m', '6h', '2d', '1h30m' → seconds; ValueError with a one-line reason otherwise."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"--since {text.strip().lower()!r}: {exc}") from None


def clock_text(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


@dataclass(frozen=True, slots=True)
class Window:
    """A journal's rows over [start, end] (Unix seconds)."""

    start: float
    end: float
    entries: list[Entry]
    minutes: list[Minute]

    def of(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]

    @property
    def rate_metric(self) -> str | None:
        seen = {m.metric for m in self.minutes}
        return next((name for name in RATE_METRICS if name in seen), None)


def is_automatic_restart(entry: Entry) -> bool:
    """The entry `pulse watch`'s restart policy wrote before it restarted the run, with the evidence it saved."""
    return entry.kind == "policy" and entry.data.get("event") == "restart" and "stacks" in entry.data


#: The parts of an automatic restart's saved evidence, in the order they are shown.
SAVED_PARTS = (("evidence", "why"), ("processes", "processes"), ("stacks", "stacks"), ("log_tail", "last log lines"),
               ("gpus", "GPUs"))


def saved_evidence_lines(data: dict) -> list[str]:
    """An automatic restart's saved evidence as indented lines: the verdict, then each part under its
    heading; a Slurm job's, then each node's own (its `nodes`) under the node's name."""
    lines = [f"{data['verdict']}: {data['summary']}"]
    for key, heading in SAVED_PARTS:
        if data.get(key):
            lines += [f"{heading}:", *(f"  {line}" for line in data[key])]
    for node in data.get("nodes", ()):
        lines += [f"node {node['node']}:", *(f"  {line}" for line in saved_evidence_lines(node))]
    return lines


def journal_lines(window: Window) -> list[str]:
    """`pulse journal`: one line per entry (an automatic restart's saved evidence below it), then the throughput per hour."""
    lines = []
    for e in window.entries:
        lines.append(f"{clock_text(e.time)}  {e.kind:<10}  {e.text}")
        if is_automatic_restart(e):
            lines += [f"{'':33}{line}" for line in saved_evidence_lines(e.data)]
    if not lines:
        lines.append("(nothing journaled in this window)")
    hours = hourly(window)
    if hours:
        unit = RATE_UNITS[window.rate_metric] if window.rate_metric else ""
        lines += ["", f"per hour (UTC)    median {unit:<10}  min        max        loss"]
        lines += [
            f"{clock_text(h)[:13]}:00  {_num(r[1]):>17}  {_num(r[0]):>9}  {_num(r[2]):>9}  {_num(loss):>9}"
            for h, r, loss in hours
        ]
    return lines


def journal_json(window: Window, path: str) -> dict:
    """`pulse journal --json`: {journal, since, until, entries: [...], minutes: [...]}."""
    return {
        "journal": path,
        "since": window.start,
        "until": window.end,
        "entries": [e.as_json() for e in window.entries],
        "minutes": [m.as_json() for m in window.minutes],
    }


def hourly(window: Window) -> list[tuple[float, tuple[float, float, float] | tuple[None, None, None], float | None]]:
    """Per UTC hour: (hour start, (min, median, max) of the rate metric's minute rows, median loss)."""
    metric = window.rate_metric
    rates: dict[int, list[Minute]] = defaultdict(list)
    losses: dict[int, list[float]] = defaultdict(list)
    for m in window.minutes:
        hour = m.minute // 60
        if m.metric == metric:
            rates[hour].append(m)
        elif m.metric == "loss":
            losses[hour].append(m.median)
    out = []
    for hour in sorted(rates.keys() | losses.keys()):
        rows = rates.get(hour)
        figures = (min(r.min for r in rows), statistics.median(r.median for r in rows), max(r.max for r in rows)) if rows else (None, None, None)
        loss = statistics.median(losses[hour]) if losses.get(hour) else None
        out.append((hour * 3600.0, figures, loss))
    return out


#: A GPU series in the journal's minutes: `gpu{index}.{figure}` (console.journal.recorder.GPU_FIGURES).
_GPU_SERIES = re.compile(rf"gpu(\d+)\.({'|'.join(figure for figure, _, _ in GPU_FIGURES)})$")


def gpu_hourly(window: Window) -> list[tuple[float, int, dict[str, float]]]:
    """Per UTC hour and GPU: the median of each figure's minute medians (utilisation, memory, power, SM clock)."""
    rows: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in window.minutes:
        found = _GPU_SERIES.match(m.metric)
        if found:
            rows[(m.minute // 60, int(found[1]))][found[2]].append(m.median)
    return [(hour * 3600.0, gpu, {figure: statistics.median(values) for figure, values in figures.items()})
            for (hour, gpu), figures in sorted(rows.items())]


def _num(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


def verdict_spans(window: Window) -> list[tuple[str, float, float]]:
    """(verdict, from, to) over the window, from the verdict changes (the one before it included)."""
    changes = window.of("verdict")
    spans = []
    for change, following in zip(changes, changes[1:] + [None]):
        start = max(change.time, window.start)
        end = following.time if following else window.end
        if end > start:
            spans.append((change.data["verdict"], start, end))
    return spans


def report_markdown(window: Window, *, host: str, run: str) -> str:
    """`pulse report`: what happened in the window and when, for an incident channel."""
    spans = verdict_spans(window)
    # An action's "started" record is in the timeline; its count is of the ones that ended.
    actions = [e for e in window.of("action") if e.data.get("record", "finished") != "started"]
    problems, alerts = window.of("problem"), window.of("alert")
    connections = window.of("connection")
    gaps = [e.data["gap_s"] for e in connections if "gap_s" in e.data]
    out = [
        f"# Pulse report: {run} on {host}",
        "",
        f"{clock_text(window.start)} → {clock_text(window.end)} UTC ({format_duration(window.end - window.start)})",
        "",
        "## Summary",
        "",
    ]
    time_in: dict[str, float] = {}
    for name, start, end in spans:
        time_in[name] = time_in.get(name, 0.0) + end - start
    if time_in:
        share = ", ".join(f"{name} {format_duration(s)}" for name, s in sorted(time_in.items(), key=lambda kv: -kv[1]))
        out.append(f"- **Verdicts:** {share}; now **{spans[-1][0]}**")
    else:
        out.append("- **Verdicts:** none journaled in this window")
    out.append(f"- **Actions:** {len(actions)}" + (f" ({', '.join(f'{n} {a}' for a, n in Counter(e.data['action'] for e in actions).items())})" if actions else ""))
    kinds = Counter(e.data["problem"] for e in problems)
    out.append(f"- **Problem lines:** {len(problems)}" + (f" ({', '.join(f'{n} {k}' for k, n in kinds.most_common())})" if problems else ""))
    out.append(f"- **Connection losses:** {sum(1 for e in connections if e.data.get('status') != 'connected')}"
               + (f", {format_duration(sum(gaps))} without data in all, longest {format_duration(max(gaps))}" if gaps else ""))
    failed = [a for a in alerts if a.data.get("ok") is False]
    sent = [a for a in alerts if "alert" in a.data]
    out.append(f"- **Alerts:** {len(sent)}" + (f", {len(failed)} failed deliveries" if failed else ""))
    automatic = [e for e in window.entries if is_automatic_restart(e)]
    if automatic:
        out.append(f"- **Automatic restarts:** {len(automatic)}")

    out += ["", "## Timeline", "", "| time (UTC) | what |", "| --- | --- |"]
    for e in window.entries:
        if e.kind in ("verdict", "action", "connection", "log", "watch", "policy") or (e.kind == "alert" and "alert" in e.data):
            out.append(f"| {clock_text(e.time)} | {e.kind}: {_cell(e.text)} |")
    if problems:
        out += ["", "## Problems (first line of each)", "", "| time (UTC) | kind | line |", "| --- | --- | --- |"]
        out += [f"| {clock_text(e.time)} | {e.data['problem']} | `{_cell(e.text, code=True)}` |" for e in problems[:50]]
        if len(problems) > 50:
            out.append(f"| … | | {len(problems) - 50} more (pulse journal) |")
    if automatic:
        out += ["", "## Automatic restarts and the evidence each saved"]
        outcomes = [e for e in window.of("policy") if e.data.get("event") == "outcome"]
        for e in automatic:
            ended = next((o for o in outcomes if o.time >= e.time), None)
            out += ["", f"### {clock_text(e.time)}: {_cell(e.text)}", ""]
            if ended is not None:
                out += [f"Outcome ({clock_text(ended.time)}): {_cell(ended.text)}", ""]
            # In a fenced block as written (a stack's frames, a log's lines), a fence of its own cut short.
            out += ["```", *(line.replace("`", "'") for line in saved_evidence_lines(e.data)), "```"]
    changes = [e for e in window.of("verdict") if e.data["verdict"] != "healthy"]
    if changes:
        last = changes[-1]
        out += ["", f"## Last problem verdict: {last.data['verdict']} ({clock_text(last.time)})", "", last.data["summary"], ""]
        out += [f"- {_cell(line)}" for line in last.data["evidence"]]
        out += ["", f"Next step: {last.data['next_step']}"]
    hours = hourly(window)
    if hours:
        unit = RATE_UNITS[window.rate_metric] if window.rate_metric else "rate"
        out += ["", "## Figures per hour", "", f"| hour (UTC) | median {unit} | min | max | loss |", "| --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {clock_text(h)[:13]}:00 | {_num(r[1])} | {_num(r[0])} | {_num(r[2])} | {_num(loss)} |" for h, r, loss in hours]
    gpu_hours = gpu_hourly(window)
    if gpu_hours:
        # A figure no hour holds (the SM clock, where the GPUs were read through NVML) has no column.
        shown = [(figure, heading) for figure, heading, _ in GPU_FIGURES if any(figure in f for _, _, f in gpu_hours)]
        out += ["", "## GPUs per hour", "", "| hour (UTC) | GPU | " + " | ".join(heading for _, heading in shown) + " |",
                "| --- | ---: |" + " ---: |" * len(shown)]
        out += [f"| {clock_text(h)[:13]}:00 | {gpu} | " + " | ".join(_num(f.get(figure)) for figure, _ in shown) + " |"
                for h, gpu, f in gpu_hours]
    high = {}
    for e in window.of("gpu_memory"):
        high[e.data["gpu"]] = e
    if high:
        out += ["", "## GPU memory high-water", ""]
        out += [f"- GPU {gpu}: {format_gib(e.data['used_mib'])}" + (f" of {format_gib(e.data['total_mib'])}" if e.data.get("total_mib") else "")
                + f" ({clock_text(e.time)})" for gpu, e in sorted(high.items())]
    delivered = [e for e in alerts if "sink" in e.data]
    if delivered:
        out += ["", "## Alert deliveries", ""]
        out += [f"- {clock_text(e.time)} {_cell(e.text)}" for e in delivered]
    return "\n".join(out) + "\n"


def _cell(text: str, *, code: bool = False) -> str:
    """Text from a log or a target, safe in a Markdown table cell."""
    text = text.replace("|", "\\|").replace("\n", " ")
    return text.replace("`", "'")[:200] if code else text[:300]


#: (Unix time, value) points of one series.
Points = tuple[tuple[float, float], ...]

#: High-water entries this close together are one burst (a sampler sees every GPU at once): one line.
HIGH_WATER_BURST_S = 10.0
#: A burst names each GPU's figure up to this many GPUs; more are written as a range.
HIGH_WATER_NAMED = 3


@dataclass(frozen=True, slots=True)
class TimelineView:
    """What the timeline screen draws: seconds before `end` on the x axis (0 is now)."""

    rate_metric: str | None
    rate: tuple[tuple[float, ...], tuple[float, ...]]
    """(seconds, values) of the throughput metric: each value where the console holds it, per-minute medians before."""
    loss: tuple[tuple[float, ...], tuple[float, ...]]
    bands: tuple[tuple[str, float, float], ...]
    """(verdict, from, to) in seconds, problem verdicts only."""
    restarts: tuple[float, ...]
    problems: tuple[float, ...]
    ticks: tuple[tuple[float, str], ...] = ()
    """(seconds, UTC clock time) for the x axis: round clock times, HH:MM, or HH:MM:SS over a short window."""


def round_ticks(low: float, high: float, count: int = 4) -> tuple[float, ...]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) from `low` to `high`."""
    if not (high > low):
        return (round(low, 3),)
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return tuple(round(first + n * step, 10) for n in range(int((high - first) / step + 1e-9) + 1))


#: Steps between clock ticks, seconds: each a round stretch of a UTC clock.
CLOCK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def clock_ticks(low: float, high: float, count: int = 5) -> tuple[tuple[float, str], ...]:
    """About `count` ticks at round UTC clock times from `low` to `high` (Unix seconds), each labelled
    with the clock: HH:MM:SS when they are less than a minute apart, HH:MM within a day, MM-DD HH:MM past it."""
    span = max(high - low, 1.0)
    step = next((s for s in CLOCK_STEPS_S if s * count >= span), CLOCK_STEPS_S[-1] * math.ceil(span / CLOCK_STEPS_S[-1] / count))
    first = math.ceil(low / step) * step
    form = (11, 19) if step < 60 else (11, 16) if span <= 86400 else (5, 16)
    return tuple((at, clock_text(at)[form[0]:form[1]]) for at in range(int(first), int(high) + 1, step))


def merged_points(minutes: list[Minute], metric: str | None, held: Points) -> Points:
    """A series at the finest resolution there is: the medians (at each minute's middle) of the minutes
    that end before the first point the console holds, then every held point (a minute they share has
    their values: its median would draw a point before the first of them)."""
    since = held[0][0] if held else math.inf
    medians = tuple((m.minute * 60 + 30.0, m.median) for m in minutes if m.metric == metric and m.minute * 60 + 60 <= since)
    return medians + held


def timeline_view(window: Window, held: Mapping[str, Points] | None = None) -> TimelineView:
    """The plot's data for `window`: rate and loss (each value of `held`, the console's own points,
    per-minute medians before them), problem verdicts, restarts and problems."""
    held = held or {}
    before = lambda at: round(at - window.end, 1)  # noqa: E731
    metric = window.rate_metric or next((name for name in RATE_METRICS if held.get(name)), None)

    def series(name: str | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
        points = merged_points(window.minutes, name, held.get(name or "", ()))
        return tuple(before(at) for at, _ in points), tuple(value for _, value in points)

    rate, loss = series(metric), series("loss")
    bands = tuple((name, before(start), before(end)) for name, start, end in verdict_spans(window) if name != "healthy")
    restarts = tuple(before(e.time) for e in window.of("action")
                     if e.data.get("action") in ("restart", "fleet restart") and e.data.get("record", "finished") == "finished")
    problems = tuple(before(e.time) for e in window.of("problem"))
    # The axis spans what is drawn (plotext shows no tick outside it), in clock time.
    drawn = [*rate[0], *loss[0], *(at for _, start, end in bands for at in (start, end)), *restarts, *problems]
    low, high = (min(drawn), max(drawn)) if drawn else (before(window.start), 0.0)
    ticks = tuple((before(at), label) for at, label in clock_ticks(window.end + low, window.end + high))
    return TimelineView(metric, rate, loss, bands, restarts, problems, ticks)


def high_water_text(entries: list[Entry]) -> str:
    """GPU memory high-water entries as one line in GiB: each GPU's figure, or their range past a few GPUs."""
    used = {e.data["gpu"]: e.data["used_mib"] for e in entries}
    totals = {e.data["total_mib"] for e in entries if e.data.get("total_mib")}
    of = f" of {format_gib(max(totals))}" if totals else ""
    if len(used) <= HIGH_WATER_NAMED:
        return "memory high-water " + ", ".join(f"GPU {gpu} {format_gib(mib)}" for gpu, mib in sorted(used.items())) + of
    top = max(used, key=lambda gpu: used[gpu])
    return (f"memory high-water GPUs {format_indices(list(used))}: {spread([mib / 1024 for mib in used.values()], '{:.1f}')} GiB"
            f"{of}, most on GPU {top}")


def timeline_events(entries: list[Entry]) -> list[tuple[int, Entry]]:
    """The timeline's event list: (index in `entries`, entry), each GPU's memory high-water only at its
    latest, and high-water entries of one burst (HIGH_WATER_BURST_S) as one entry: eight GPUs seen in
    one sample buried the verdicts under eight lines."""
    latest = {e.data.get("gpu"): index for index, e in enumerate(entries) if e.kind == "gpu_memory"}
    out: list[tuple[int, Entry]] = []
    burst: list[Entry] = []
    for index, entry in enumerate(entries):
        if entry.kind != "gpu_memory":
            out.append((index, entry))
        elif latest[entry.data.get("gpu")] == index:
            # Every high-water line in `out` is a burst's: the last one shown continues when nothing came between.
            if burst and out[-1][1].kind == "gpu_memory" and entry.time - burst[0].time <= HIGH_WATER_BURST_S:
                burst.append(entry)
                out.pop()
            else:
                burst = [entry]
            out.append((index, Entry(entry.time, "gpu_memory", high_water_text(burst), {})))
    return out
