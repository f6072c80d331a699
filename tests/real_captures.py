"""Replay of the real runs captured on an H200 host (tests/data/real, see its README) through
Pulse's real parsers: each capture becomes the two agent lines a diagnosis would have sampled
(parsed by console.observe.sampler.parse_sample), the log's lines with the times they were
written (into a RunState, as the console's follower fills it), and the py-spy dumps of every
process (parsed and summarised as a diagnosis does). What comes out is the Evidence that
console.diagnose.diagnose judges."""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from dataclasses import replace
from pathlib import Path

from console.config import Config, RunConfig
from console.diagnose import Evidence
from console.evidence import TAIL_BYTES, dump_order, from_samples, with_dumps, with_lifetime_rhythm, with_read_rhythm
from console.model import LogLine, Sample
from console.observe.agent import UNREAD_GPU, python_unbuffered_flag, run_env
from console.observe.follow import MAX_LINE_BYTES
from console.observe.lines import classify_line
from console.observe.nccl import FlightRecord, dump_rank, parse_flight_record
from console.observe.pyspy import ProcessDump, ThreadSamples, classify_error, parse_dump_json, parse_record_raw
from console.observe.pyspy_run import DumpError
from console.observe.sampler import parse_sample
from console.observe.textsafe import sanitize
from console.stall import writes_in
from console.state import RunState

REAL = Path(__file__).resolve().parent / "data" / "real"
CLOCK_TICKS = 100
#: The capture read each process's /proc/PID/stat twice, this far apart.
STAT_GAP_S = 1.0
_LINE_END = re.compile(rb"\r\n|\r|\n")
#: Seen from a container, the driver's PIDs are the host's: the captured ones moved this far, out of
#: the range of every PID the capture's /proc holds (the namespace's view).
HOST_PID_OFFSET = 3_000_000


class Capture:
    """One scenario folder of tests/data/real."""

    def __init__(self, name: str, *, ended: bool = False, container: bool = False, look: str | None = None) -> None:
        """`ended`: look after the job ended (its whole log, no process left) instead of at the snapshot.
        `container`: look from inside a PID namespace, where NVML lists host PIDs (NVML readings only).
        `look`: one of several looks of a capture (tests/data/real/verdicts: `at_45/`), with the stacks'
        recordings and each thread's schedstat."""
        self.name = name
        self.ended = ended
        self.container = container
        self.folder = REAL / name
        self.seen = self.folder / look if look else self.folder
        """Where the look's readings are: processes, GPUs, dumps."""
        self.meta = json.loads((self.folder / "meta.json").read_text())
        self.snapshot = json.loads((self.seen / ("look.json" if look else "snapshot.json")).read_text())
        self.writes = [json.loads(line) for line in (self.folder / "write_times.jsonl").read_text().splitlines()]
        trimmed = (self.folder / "trim.json").exists()
        # A trimmed log (lightning_tqdm) kept only its start, written without a pause: its end stands for the snapshot.
        self.now = self.writes[-1]["t"] if trimmed else self.snapshot["monotonic"]
        if ended:
            self.now = self.meta["end_monotonic"]
        self.config = Config(run=RunConfig(log=f"/tmp/cap/{name}/run.log", match=self.meta["match"]))

    def unix(self, monotonic: float) -> float:
        return self.snapshot["unix"] + (monotonic - self.snapshot["monotonic"])

    # -- processes ----------------------------------------------------------------------------

    def run_processes(self) -> list[dict]:
        """The run's processes as captured: its root and every descendant (never the neighbour)."""
        captured = json.loads((self.seen / "processes.json").read_text())
        pids = {self.meta["pid"]}
        for _ in captured:
            pids |= {p["pid"] for p in captured if p["stat"]["ppid"] in pids}
        if self.ended:
            return []
        # A zombie has no command line left: the agent's match cannot find it, as it could not here.
        # A process that ended within the look (a ptxas) is not in its second reading.
        return [p for p in captured if p["pid"] in pids and any(p["cmdline"]) and p.get("stat_1s_later", True)]

    def _process_record(self, p: dict, later: bool) -> dict:
        stat = p["stat_1s_later"] if later else p["stat"]
        ticks = stat["utime"] + stat["stime"]
        before = p["stat"]["utime"] + p["stat"]["stime"]
        environ = [f"{k}={v}" for k, v in p.get("environ", {}).items()]
        return {
            "pid": p["pid"],
            "ppid": stat["ppid"],
            "state": stat["state"],
            "elapsed_s": round(self.now - stat["starttime"] / CLOCK_TICKS, 2),
            "threads": stat["num_threads"],
            "rss_mib": 0.0,
            "cpu_pct": round((ticks - before) / CLOCK_TICKS / STAT_GAP_S * 100.0, 1) if later else None,
            "cpu_s": round(ticks / CLOCK_TICKS, 2),
            "cmdline": " ".join(p["cmdline"]),
            "nspid": [p["pid"]],
            "stdout": p.get("fd1"),
            "unbuffered": python_unbuffered_flag(p["cmdline"]) or bool(p.get("environ", {}).get("PYTHONUNBUFFERED")),
            "children": [],
            "thread_cpu": [],
            "env": run_env(environ),
        }

    # -- GPUs ---------------------------------------------------------------------------------

    def _gpu_part(self, source: str, with_process_use: bool) -> dict:
        if source == "nvidia-smi":
            if self.container:
                raise ValueError("the container's view is built from the NVML readings (PIDs in JSON, not in text)")
            part = {
                "gpu_source": "nvidia-smi",
                "gpu_error": None,
                "gpus": [],
                "smi_gpu_csv": (self.folder / "smi_query_gpu.csv").read_text(),
                "smi_apps_csv": (self.folder / "smi_apps.csv").read_text(),
            }
            if with_process_use:
                part["smi_pmon"] = (self.folder / "smi_pmon.txt").read_text()
            return part
        nvml = json.loads((self.seen / "nvml.json").read_text())
        gpus, process_sm = [], {}
        for g in nvml["gpus"]:
            gpus.append(
                {
                    **UNREAD_GPU,  # what the capture did not record stays unread, as the agent sends it
                    "index": g["index"],
                    "uuid": g["uuid"],
                    "name": "NVIDIA H200",
                    "utilization_pct": float(g["utilization"]["gpu"]),
                    "processes": [
                        {"pid": self._driver_pid(p["pid"]), "used_mib": p["used_bytes"] // (1 << 20), "name": None}
                        for p in g["compute_processes"]
                    ],
                    "error": None,
                }
            )
            samples: dict[int, list[float]] = {}
            for sample in g.get("process_utilization") or []:
                samples.setdefault(self._driver_pid(sample["pid"]), []).append(sample["smUtil"])
            process_sm[str(g["index"])] = [[pid, sum(v) / len(v)] for pid, v in samples.items()]
        part = {"gpu_source": "nvml", "gpu_error": None, "gpus": gpus, "smi_gpu_csv": None, "smi_apps_csv": None}
        if with_process_use:
            part["process_sm"] = process_sm
        return part

    def _driver_pid(self, pid: int) -> int:
        """`pid` as the driver lists it: the host's numbering, which a container's /proc does not share."""
        return pid + HOST_PID_OFFSET if self.container else pid

    # -- the log ------------------------------------------------------------------------------

    def _written(self, until: float) -> tuple[int, float]:
        """(size, time of the last write) of the log at monotonic time `until`."""
        seen = [w for w in self.writes if w["t"] <= until]
        last = seen[-1] if seen else self.writes[0]
        return last["offset"], last["t"]

    def _log_record(self, at: float) -> dict:
        size, written = self._written(at)
        return {"path": self.config.run.log, "exists": True, "size": size, "mtime": self.unix(written), "inode": 1,
                "mode": 0o100644}

    def log_bytes(self, until: float | None = None) -> bytes:
        """What the log held at monotonic time `until` (now by default)."""
        size, _ = self._written(self.now if until is None else until)
        return (self.folder / "run.log").read_bytes()[:size]

    def lines(self, until: float | None = None) -> list[LogLine]:
        """The log's lines (a bar's `\\r` redraws each one) written by `until`, each with the time of its write."""
        data = self.log_bytes(until)
        offsets = [w["offset"] for w in self.writes]
        out: list[LogLine] = []
        start = 0
        for match in _LINE_END.finditer(data):
            raw, start = data[start : match.start()], match.end()
            if not raw.strip():
                continue
            text, cut = sanitize(raw.decode("utf-8", "replace"), MAX_LINE_BYTES)
            write = self.writes[min(bisect_left(offsets, match.end()), len(self.writes) - 1)]
            out.append(LogLine(len(out) + 1, text, classify_line(text), cut, write["t"]))
        return out

    # -- the evidence -------------------------------------------------------------------------

    def samples(self, source: str = "nvidia-smi") -> tuple[Sample, Sample]:
        processes = self.run_processes()
        lines = []
        for later, at in ((False, self.now - STAT_GAP_S), (True, self.now)):
            line = {
                "t": self.unix(at),
                **self._gpu_part(source, with_process_use=later),
                "processes": [self._process_record(p, later) for p in processes],
                "process_error": None,
                "in_pid_namespace": self.container,
                "log": self._log_record(at),
            }
            lines.append(parse_sample(json.loads(json.dumps(line))))
        return lines[0], lines[1]

    def evidence(
        self, source: str = "nvidia-smi", *, stacks: bool = True, timed: bool = True, opened_late: bool = False
    ) -> Evidence:
        """What a diagnosis sees: followed all along (`timed`, each line dated by its write); followed by
        a console opened just now (`opened_late`: the whole log read at once, its rhythm estimated from
        what was read); or, as `pulse check` reads it, from the log's tail with the rhythm estimated
        from its size. With the stacks as dumped, and how each thread moved where the look recorded them."""
        first, last = self.samples(source)
        state = RunState(clock=lambda: self.now)
        if opened_late:
            state.add_lines([replace(line, time=self.now) for line in self.lines()])
            data = self.log_bytes()
            state.note_read(len(data), writes_in(data))
        else:
            state.add_lines(self.lines())
        evidence = from_samples(first, last, self.config, state, timed=timed)
        if opened_late:
            evidence = with_read_rhythm(evidence, state)
        if not timed:
            evidence = with_lifetime_rhythm(evidence, self.log_bytes()[-TAIL_BYTES:].decode("utf-8", "replace"))
        if evidence.nccl:
            evidence = replace(evidence, flight=self.flight_records())
        if not stacks or not last.processes:
            return evidence
        dumps = [(process, self.dump(process.pid)) for process in dump_order(last.processes)]
        if not (self.seen / "record_idle").is_dir():
            return with_dumps(evidence, dumps)
        return with_dumps(evidence, dumps, recorded=self.recorded(), woke=self.woke())

    def recorded(self) -> dict[int, list[ThreadSamples]]:
        """pid → what `py-spy record --idle` saw of its threads."""
        return {int(f.stem): parse_record_raw(f.read_text()) for f in (self.seen / "record_idle").glob("*.txt")}

    def woke(self) -> dict[int, int]:
        """tid → how often each thread was scheduled between the look's two /proc readings."""
        out = {}
        for p in json.loads((self.seen / "processes.json").read_text()):
            before, after = p.get("schedstat", {}), p.get("schedstat_1s_later", {})
            out.update({int(tid): after[tid]["timeslices"] - s["timeslices"] for tid, s in before.items() if tid in after})
        return out

    def flight_records(self) -> tuple[FlightRecord, ...]:
        """The ranks' flight-recorder dumps, through the restricted unpickler (none when the run wrote none)."""
        prefix = str(self.folder / "nccl_trace_rank_")
        dumps = sorted(self.folder.glob("nccl_trace_rank_[0-9]"))
        return tuple(parse_flight_record(path.read_bytes(), dump_rank(str(path), prefix)) for path in dumps)

    def dump(self, pid: int) -> ProcessDump | DumpError:
        """The captured `py-spy dump --json` of `pid`, or its failure as the dump action reports it."""
        text = (self.seen / "pyspy" / f"{pid}.json").read_text()
        try:
            return next(d for d in parse_dump_json(text) if d.pid == pid)
        except ValueError:
            code, advice = classify_error(text, 1)
            return DumpError(code, f"py-spy on pid {pid}: {advice}")


def scenarios() -> list[str]:
    """Every captured run (the neighbour has no snapshot of its own)."""
    return sorted(p.parent.name for p in REAL.glob("*/snapshot.json"))
