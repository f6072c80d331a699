"""The bench's figures as one JSON object (headline keys first) and as a markdown report."""

from __future__ import annotations

from benchlib.stats import ratio

GOALS = (
    # key, what, comparison, target
    ("poll_speedup_vs_fresh_ssh", "Poll latency vs a fresh ssh per poll, same queries (worse of clean/slow .bashrc)", ">=", 30),
    ("poll_remote_cpu_ratio_vs_fresh_ssh", "Poll remote CPU vs a fresh ssh per poll, same queries (worse of clean/slow)", ">=", 30),
    ("poll_vs_local_ratio", "Poll latency ÷ the same probe in a local bash -c (worse of clean/slow)", "<=", 1.0),
    ("tail_p99_ratio_vs_ssh_tail", "Tail p99 write→screen ÷ ssh tail -F write→receipt", "<=", 1.5),
    ("tail_screen_p99_ms", "Tail write→screen p99 (ms): two frames at 60 fps", "<=", 33),
    ("flood_lines_per_s", "Flood rate kept up with key response p99 < 100 ms (lines/s, keys posted in-process)", ">=", 50_000),
    ("flood_key_terminal_p99_ms", "Key → its effect drawn, through a pty, during 50,000 lines/s, p99 (ms)", "<", 100),
    ("idle_cpu_pct", "Idle console CPU, % of one core (8 GPUs at 1 Hz, drawing into a 120×40 pty as top and btop do)", "<", 1.0),
    ("idle_remote_cpu_pct", "Idle remote CPU, % of one core (agent + follower + sshd)", "<", 0.5),
    ("memory_heap_growth_mib_per_hour", "Memory growth of the real console over SSH: its heap (Python's objects and malloc's chunks in use), second half of a fixed window, least squares (MiB per hour)", "<", 1.0),
    ("logs_bar_vs_line_ratio", "Console's whole process tree watching a tqdm bar redrawn 10×/s (HF Trainer, Lightning: the worse) ÷ watching one line a second", "<=", 1.5),
    ("start_ms", "pulse demo → first full frame, median (ms)", "<", 500),
    ("diagnosis_ms", "Key d → verdict on screen on a two-rank hang quiet past the floor, default path (every rank dumped and recorded), median (ms)", "<", 3000),
    ("check_ms", "pulse check (a whole process, as typed) on the same hang, median (ms)", "<", 3000),
    ("silence_left_healthy_s", "A run writing once a second stops: header leaves healthy after (s)", "<=", 30),
    ("fleet_256_cpu_pct", "Fleet of 256 simulated nodes (paced: each sampled and its log read every 4 s): console CPU, % of one core", "<", 10),
)


def _get(data: dict, *path, default=None):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


def _worst(values, pick):
    present = [v for v in values if v is not None]
    return pick(present) if present else None


def headline(phases: dict) -> dict:
    """The figures the goals name, from the phases' details."""
    poll = phases.get("poll", {})
    out: dict = {}
    for server in ("clean", "slow"):
        for key, name in (
            ("latency_speedup_vs_fresh_ssh", "poll_speedup_vs_fresh_ssh"),
            ("remote_cpu_ratio_vs_fresh_ssh", "poll_remote_cpu_ratio_vs_fresh_ssh"),
            ("latency_vs_local_bash", "poll_vs_local_ratio"),
            ("no_gpu_latency_speedup_vs_fresh_ssh", "poll_no_gpu_speedup_vs_fresh_ssh"),
            ("no_gpu_remote_cpu_ratio_vs_fresh_ssh", "poll_no_gpu_remote_cpu_ratio_vs_fresh_ssh"),
            ("no_gpu_latency_vs_local_bash", "poll_no_gpu_vs_local_ratio"),
        ):
            out[f"{name}_{server}"] = _get(poll, server, "ratios", key)
    for name in ("poll_speedup_vs_fresh_ssh", "poll_remote_cpu_ratio_vs_fresh_ssh", "poll_no_gpu_speedup_vs_fresh_ssh",
                 "poll_no_gpu_remote_cpu_ratio_vs_fresh_ssh"):
        out[name] = _worst([out[f"{name}_clean"], out[f"{name}_slow"]], min)
    for name in ("poll_vs_local_ratio", "poll_no_gpu_vs_local_ratio"):
        out[name] = _worst([out[f"{name}_clean"], out[f"{name}_slow"]], max)
    for server in ("clean", "slow"):
        out[f"poll_own_cadence_speedup_vs_fresh_ssh_{server}"] = _get(poll, server, "ratios", "own_cadence_latency_speedup_vs_fresh_ssh")
    out["poll_own_cadence_speedup_vs_fresh_ssh"] = _worst(
        [out["poll_own_cadence_speedup_vs_fresh_ssh_clean"], out["poll_own_cadence_speedup_vs_fresh_ssh_slow"]], min
    )
    out["poll_pulse_latency_ms"] = _get(poll, "clean", "pulse_agent", "latency_ms", "median")
    out["poll_fresh_ssh_latency_ms"] = _get(poll, "clean", "fresh_ssh", "latency_ms", "median")

    tail = phases.get("tail", {})
    ssh_p99 = _get(tail, "ssh_tail_f", "receipt_ms", "p99")
    out["tail_p99_ratio_vs_ssh_tail"] = ratio(_get(tail, "pulse", "screen_ms", "p99"), ssh_p99, 2)
    out["tail_state_p99_ratio_vs_ssh_tail"] = ratio(_get(tail, "pulse", "state_ms", "p99"), ssh_p99, 2)
    out["tail_screen_p99_ms"] = _get(tail, "pulse", "screen_ms", "p99")
    out["tail_ssh_p99_ms"] = ssh_p99

    flood = phases.get("flood", {})
    out["flood_lines_per_s"] = flood.get("max_rate_kept_up")
    kept = [s for s in flood.get("steps", []) if s.get("kept_up")]
    out["flood_key_p99_ms"] = _get(kept[-1], "key_ms", "p99") if kept else None
    out["flood_key_terminal_p99_ms"] = _get(flood, "terminal", "key_ms", "p99")
    out["flood_key_terminal_missed"] = _get(flood, "terminal", "missed")

    # The console as the anchors are measured: its whole process drawing into a pseudo-terminal.
    out["idle_cpu_pct"] = _get(phases, "idle", "terminal")
    out["idle_headless_cpu_pct"] = _get(phases, "idle", "nvidia_smi", "console_cpu_pct")
    out["idle_remote_cpu_pct"] = _get(phases, "idle", "nvidia_smi", "remote_cpu_pct")
    out["idle_remote_cpu_pct_no_gpu_reads"] = _get(phases, "idle", "no_gpu_reads", "remote_cpu_pct")
    for name in ("top", "btop"):
        out[f"idle_{name}_cpu_pct"] = _get(phases, "idle", "anchors", name)
        out[f"idle_cpu_ratio_vs_{name}"] = ratio(out["idle_cpu_pct"], out[f"idle_{name}_cpu_pct"], 2)
    # The age of the freshest data when it is drawn, Pulse's way, next to the manual round trip
    # (a manual poll's data is at most as old as its round trip when it is printed).
    out["screen_age_median_ms"] = _get(phases, "idle", "nvidia_smi", "screen_age_ms", "median")
    out["screen_age_vs_fresh_ssh_round_trip"] = ratio(out["screen_age_median_ms"], out["poll_fresh_ssh_latency_ms"], 2)
    out["memory_rss_after_lines_mib"] = _get(phases, "memory", "rss_after_lines_mib")
    out["memory_growth_mib_per_hour"] = _get(phases, "memory", "rss_growth_mib_per_hour")
    out["memory_heap_growth_mib_per_hour"] = _get(phases, "memory", "heap_growth_mib_per_hour")
    # Kept for readers of earlier runs: an hour is not watched, and buffers are not all full.
    out["memory_growth_last_hour_mib"] = None
    out["memory_growth_after_full_mib_per_hour"] = None
    bars = [_get(phases, "logs", shape, "console", "total") for shape in ("hf", "lightning")]
    out["logs_bar_cpu_pct"] = _worst(bars, max)
    out["logs_line_cpu_pct"] = _get(phases, "logs", "stamped", "console", "total")
    out["logs_bar_vs_line_ratio"] = ratio(out["logs_bar_cpu_pct"], out["logs_line_cpu_pct"], 2)
    out["start_ms"] = _get(phases, "start", "full_frame_ms", "median")
    out["diagnosis_ms"] = _get(phases, "diagnosis", "key_to_verdict_ms", "median")
    out["check_ms"] = _get(phases, "diagnosis", "check", "wall_ms", "median")
    out["silence_left_healthy_s"] = _get(phases, "silence", "header_left_healthy_after_s")
    # A fleet whose start-up did not finish was measured as far as it got: cheaper, and no figure.
    started = _get(phases, "fleet", "all_nodes_sampling_after_s") is not None
    out["fleet_256_cpu_pct"] = _get(phases, "fleet", "console_cpu_pct_of_one_core") if started else None
    out["fleet_256_verdict_s"] = _get(phases, "fleet", "fleet_diagnosis_s")
    return out


def goals(figures: dict, phases: dict) -> dict:
    """Each goal met or not; one not measured is missed, with the cause (the phase's error, or
    not run), never met."""
    out = {}
    for key, what, op, target in GOALS:
        value = figures.get(key)
        goal = {"what": what, "goal": f"{op} {target:g}", "value": value}
        if value is None:
            phase = GOAL_PHASES.get(key.split("_")[0], key.split("_")[0])
            cause = _get(phases, phase, "error") or (NOT_RUN.get(phase, f"the {phase} phase did not run") if phase not in phases else "not measured")
            goal.update(met=False, cause=cause)
        else:
            goal["met"] = {">=": value >= target, "<=": value <= target, "<": value < target}[op]
        out[key] = goal
    return out


#: Why a phase is left out unless named.
NOT_RUN = {
    "fleet": "not run by default (scripts/bench --only fleet): the 256 simulated nodes' agents share this "
    "machine's cores, and on 2 cores they saturate it (load average > 250)",
}
#: A goal key's first word → the phase that measures it, where they differ.
GOAL_PHASES = {"screen": "idle", "start": "start"}


# -- markdown --------------------------------------------------------------------------------


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header, rows) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]


def markdown(result: dict) -> str:
    m, p = result["machine"], result["phases"]
    lines = [
        f"# Pulse bench{' (--quick)' if result['quick'] else ''}",
        "",
        f"{m['nproc']} × {m['cpu_model']}, Linux {m['kernel']}, {m['openssh']}, Python {m['python']}, "
        f"asyncssh {m['asyncssh']}, Textual {m['textual']}; load average {' '.join(m['loadavg_at_start'])} at start, "
        f"{' '.join(m.get('loadavg_at_end', []))} at the end (other work shares these cores); "
        f"{result['elapsed_s']:.0f} s in all. Medians, with p95 where shown; ratios are against the manual way "
        "measured in the same run.",
        "",
        "## Goals",
        "",
        *_table(
            ["goal", "target", "measured", "met"],
            [[g["what"], g["goal"], _fmt(g["value"], 2), "yes" if g["met"] else f"**no**{': ' + g['cause'] if g.get('cause') else ''}"]
             for g in result["goals"].values()],
        ),
    ]
    if "poll" in p and "clean" in p["poll"]:
        lines += ["", "## 1. Poll: one full sample (processes, 2 × nvidia-smi stand-in, log stat)", ""]
        rows = []
        names = [("fresh_ssh", "fresh ssh per poll"), ("controlmaster", "ssh ControlMaster"),
                 ("asyncssh_exec", "asyncssh, exec channel per poll"),
                 ("pulse_agent", "**Pulse agent stream, same queries**"),
                 ("pulse_agent_own_cadence", "Pulse agent, its own cadence (compute apps every 5 s: less work)"),
                 ("fresh_ssh_no_gpu", "fresh ssh, no GPU read"), ("pulse_agent_no_gpu", "**Pulse agent, no GPU read**")]
        for server in ("clean", "slow"):
            ways = p["poll"][server]
            for key, label in names:
                way = ways[key]
                base = ways["pulse_agent_no_gpu" if key.endswith("no_gpu") else "pulse_agent"]["latency_ms"]["median"]
                rows.append([
                    server, label, _fmt(way["latency_ms"]["median"]), _fmt(way["latency_ms"]["p95"]),
                    _fmt(way["client_cpu_ms"]["median"], 2), _fmt(way.get("remote_cpu_ms"), 2),
                    f"{_fmt(ratio(way['latency_ms']['median'], base))}×",
                ])
        for key, label in (("local_bash", "local bash -c"), ("local_bash_no_gpu", "local bash -c, no GPU read")):
            way = p["poll"][key]
            rows.append(["local", label, _fmt(way["latency_ms"]["median"]), _fmt(way["latency_ms"]["p95"]),
                         _fmt(way["client_cpu_ms"]["median"], 2), "—", "—"])
        lines += _table(["server", "way", "latency ms", "p95", "client CPU ms/poll", "remote CPU ms/poll",
                         "latency ÷ Pulse"], rows)
        lines += ["", "Ratios (manual ÷ Pulse; vs local: Pulse ÷ local):", ""]
        lines += _table(["server", *p["poll"]["clean"]["ratios"].keys()],
                        [[s, *(_fmt(v, 2) for v in p["poll"][s]["ratios"].values())] for s in ("clean", "slow")])
    if "tail" in p and "pulse" in p["tail"]:
        t = p["tail"]
        lines += ["", f"## 2. Tail latency ({t['rate_lines_per_s']} stamped lines/s)", ""]
        lines += _table(
            ["path", "lines", "median ms", "p95 ms", "p99 ms", "max ms"],
            [
                ["ssh host tail -F: write → receipt", t["ssh_tail_f"]["written"], *_stats(t["ssh_tail_f"]["receipt_ms"])],
                ["Pulse: write → RunState", t["pulse"]["written"], *_stats(t["pulse"]["state_ms"])],
                ["Pulse: write → on screen", t["pulse"]["written"], *_stats(t["pulse"]["screen_ms"])],
            ],
        )
    if "flood" in p and "steps" in p["flood"]:
        lines += ["", "## 3. Flood (~120-byte lines, key pressed every 50 ms)", ""]
        lines += _table(
            ["offered lines/s", "written", "received", "handled lines/s", "caught up after ms", "key median ms",
             "key p99 ms", "kept up"],
            [[_fmt(s["rate"]), _fmt(s["written"]), _fmt(s["received"]), _fmt(s["lines_per_s"]),
              _fmt(None if s["catch_up_s"] is None else s["catch_up_s"] * 1000, 0), _fmt(s["key_ms"]["median"]),
              _fmt(s["key_ms"]["p99"]), "yes" if s["kept_up"] else "**no**"] for s in p["flood"]["steps"]],
        )
        lines += ["", "Keys above are posted to the app from a thread (the headless driver). Through a terminal:"]
        if "terminal" in p["flood"]:
            t = p["flood"]["terminal"]
            lines += ["", *_table(["offered lines/s", "written", "keys", "median ms", "p95 ms", "p99 ms", "max ms", "missed (> 2 s)"],
                                  [[_fmt(t["rate"]), _fmt(t["written"]), t["key_ms"]["n"], *_stats(t["key_ms"]), t["missed"]]])]
            lines += ["", "(`f` typed into a pseudo-terminal running the console with its own terminal driver, timed to the "
                      "first output that draws its effect.)"]
    if "idle" in p and "nvidia_smi" in p["idle"]:
        lines += ["", "## 4. Idle cost (demo run, 8 GPUs, 1 Hz, % of one core)", ""]
        rows = []
        for key, label in (("nvidia_smi", "GPUs via stand-in nvidia-smi"), ("no_gpu_reads", "GPU read skipped (not NVML: NVML is not measured here)"),
                           ("monitor_only", "sources into RunState, no app"), ("app_only", "app, state no longer changing")):
            if key in p["idle"]:
                i = p["idle"][key]
                by = i["remote_cpu_pct_by_process"]
                rows.append([label, _fmt(i["seconds"]), i["samples"], _fmt(i["console_cpu_pct"], 2), _fmt(i["remote_cpu_pct"], 2),
                             _fmt(by.get("agent"), 2), _fmt(by.get("follower"), 2), _fmt(by.get("sshd"), 2)])
        lines += _table(["watching", "seconds", "samples", "console %", "remote %", "agent (+nvidia-smi) %",
                         "follower %", "sshd %"], rows)
        lines += ["", "(The rows above: the headless app in the bench's child, the process's CPU; no terminal output.)"]
        anchors = p["idle"].get("anchors") or {}
        console = p["idle"].get("terminal")
        if console is not None:
            lines += ["", "The console with its own terminal driver drawing into a 120×40 pseudo-terminal, its whole process, "
                      "beside terminal monitors drawing the same terminal once a second (nvitop needs NVML: not here):", ""]
            lines += _table(["program", "CPU % of one core", "Pulse ÷ it"],
                            [["Pulse", _fmt(console, 2), "—"]]
                            + [[name, _fmt(pct, 2) if pct is not None else f"not installed here (apt-get install {name})",
                                _fmt(ratio(console, pct, 2), 2)] for name, pct in anchors.items()])
        age = p["idle"]["nvidia_smi"].get("screen_age_ms")
        if age and age.get("n"):
            lines += ["", "Age of the freshest GPU data when it is drawn (frame time − the agent's read time), next to "
                      "the manual way's round trip (a fresh ssh per poll: its data is at most that old when printed):", ""]
            rows = [["Pulse: age on screen", age["n"], _fmt(age["median"]), _fmt(age["p95"]), _fmt(age["max"])]]
            trip = _get(p, "poll", "clean", "fresh_ssh", "latency_ms")
            if trip:
                rows.append(["fresh ssh per poll: round trip", trip["n"], _fmt(trip["median"]), _fmt(trip["p95"]), _fmt(trip["max"])])
            lines += _table(["way", "n", "median ms", "p95 ms", "max ms"], rows)
    if "memory" in p and "rss_after_lines_mib" in p["memory"]:
        mem = p["memory"]
        lines += ["", f"## 5. Memory (the real console over SSH: {mem['lines']:,} lines at 50,000/s, then "
                  f"{mem['watched_s']} s of wall-clock time watching the run at 1 Hz)", ""]
        lines += _table(["at", "RSS MiB"], [["start (first sample in)", _fmt(mem["rss_start_mib"])],
                                            [f"{mem['lines']:,} lines in ({mem['ingest_s']} s)", _fmt(mem["rss_after_lines_mib"])],
                                            [f"+{mem['watched_s']} s", _fmt(mem["rss_end_mib"])]])
        lines += ["", f"Growth over the second half of the window, per hour: the heap (Python's objects and malloc's "
                  f"chunks in use) {_fmt(mem['heap_late_mib'][0], 2)} → {_fmt(mem['heap_late_mib'][1], 2)} MiB, "
                  f"{_fmt(mem['heap_growth_mib_per_hour'], 2)} MiB per hour (least squares over a reading a second, each after a full collection); "
                  f"RSS {_fmt(mem['rss_growth_mib_per_hour'], 2)} MiB per hour from its two ends (it counts the pages "
                  f"ever touched: it rises in steps and rarely falls); Python's allocated blocks {mem['heap_blocks_late'][0]:,} → "
                  f"{mem['heap_blocks_late'][1]:,}."]
    if "start" in p and "full_frame_ms" in p["start"]:
        s = p["start"]
        lines += ["", "## 6. Start (`pulse demo` in a pseudo-terminal, 120×40)", ""]
        lines += _table(["to", "n", "median ms", "p95 ms"],
                        [[label, s[key]["n"], _fmt(s[key]["median"]), _fmt(s[key]["p95"])] for key, label in (
                            ("first_output_ms", "first output (alternate screen)"),
                            ("full_frame_ms", "first full frame (the first sample drawn: GPUs, processes)"),
                            ("first_log_line_ms", "first trainer log line drawn (the trainer writes it ~1.7 s after its start)"))])
    if "logs" in p and "hf" in p["logs"]:
        lines += ["", "## 4b. Logs as frameworks write them (this machine, a local target, 120×40 pseudo-terminal, % of one core)", ""]
        lines += _table(["log", "redraws or lines a second", "console tree %", "console %", "sampling agent %", "log follower %",
                         "tail -F %", "Pulse ÷ tail -F"],
                        [[shape, _fmt(s["rate_per_s"]), _fmt(s["console"]["total"], 2), _fmt(s["console"]["other"], 2),
                          _fmt(s["console"]["sampling agent"], 2), _fmt(s["console"]["log follower"], 2), _fmt(s["tail_F"]["total"], 2),
                          _fmt(s["ratio"], 1) if s["ratio"] is not None else "tail -F under the clock's 10 ms tick"]
                         for shape, s in p["logs"].items() if isinstance(s, dict) and "console" in s])
    if "diagnosis" in p and "key_to_verdict_ms" in p["diagnosis"]:
        d = p["diagnosis"]
        lines += ["", "## 7. Diagnosis (two-rank hang: tests/procs/torchrun + straggler_rank.py, key d → verdict screen)", ""]
        lines += _table(["n", "median ms", "p95 ms", "max ms", "verdicts", "threads summarised"],
                        [[d["key_to_verdict_ms"]["n"], _fmt(d["key_to_verdict_ms"]["median"]), _fmt(d["key_to_verdict_ms"]["p95"]),
                          _fmt(d["key_to_verdict_ms"]["max"]), ", ".join(map(str, d["verdicts"])), ", ".join(map(str, d["stack_groups"]))]])
        if "check" in d:
            c = d["check"]
            lines += ["", "`pulse check` as typed on the same hang (a whole process: start, two samples, the stacks):", ""]
            lines += _table(["n", "median ms", "p95 ms", "max ms", "verdicts"],
                            [[c["wall_ms"]["n"], _fmt(c["wall_ms"]["median"]), _fmt(c["wall_ms"]["p95"]), _fmt(c["wall_ms"]["max"]),
                              ", ".join(c["verdicts"])]])
    if "silence" in p and "header_left_healthy_after_s" in p["silence"]:
        q = p["silence"]
        lines += ["", "## 8. Silence (tests/procs/healthy.py --interval 1 --steps 12, then idle; no [stall] log_silent_s)", ""]
        lines += _table(["header says quiet after s", "header leaves healthy after s", "then"],
                        [[_fmt(q["header_quiet_after_s"]), _fmt(q["header_left_healthy_after_s"]), f"{q['verdict']}: {q['summary']}"]])
    if "fleet" in p and "console_cpu_pct_of_one_core" in p["fleet"]:
        f = p["fleet"]
        lines += ["", f"## 9. Fleet ({f['nodes']} simulated nodes, each sampled every {f['node_poll_s']:g} s, "
                  "scripts/bench_fleet.py)", ""]
        lines += _table(["console % of one core", "per node %", "RSS MiB", "per node MiB", "all sampling after s",
                         "fleet verdict from held samples ms", "fleet diagnosis s", "fresh diagnosis s"],
                        [[_fmt(f["console_cpu_pct_of_one_core"], 2), _fmt(f["console_cpu_pct_per_node"], 3),
                          _fmt(f["console_rss_mib"]), _fmt(f["console_rss_mib_per_node"], 2), _fmt(f["all_nodes_sampling_after_s"]),
                          _fmt(f["fleet_verdict_from_held_samples_ms"]), _fmt(f["fleet_diagnosis_s"]), _fmt(f["fresh_diagnosis_s"])]])
    errors = {name: phase["error"] for name, phase in p.items() if isinstance(phase, dict) and "error" in phase}
    if errors:
        lines += ["", "## Phases that failed", ""] + [f"- {name}: {text}" for name, text in errors.items()]
    return "\n".join(lines) + "\n"


def _stats(s: dict) -> list[str]:
    return [_fmt(s["median"]), _fmt(s["p95"]), _fmt(s["p99"]), _fmt(s["max"])]
