"""The timeline's figures (`h`), pure: its series at their own resolution, its clock axis, its event list.

Issue 33, item 8: a two-minute run drew tok/s and loss as one straight diagonal each (two minute
medians), and eight GPU-memory high-water lines from one sample came before the first verdict.
"""

from __future__ import annotations

from console.journal.report import Window, clock_ticks, merged_points, report_markdown, timeline_events, timeline_view
from console.journal.store import Entry, Minute
from tests.snapshot_apps.timeline import RATE_EVERY_S, RATE_VALUES, WALL_END, short_history

H200_TOTAL_MIB = 143771


def test_a_two_minute_history_of_sixty_rate_values_plots_all_sixty(tmp_path):
    window, held = short_history(tmp_path / "run.sqlite3")
    minutes = [m for m in window.minutes if m.metric == "tokens_per_s"]
    assert len(minutes) <= 3  # what the plot drew before: a straight line through the minutes' medians

    view = timeline_view(window, held)

    assert len(view.rate[0]) == RATE_VALUES and len(view.loss[0]) == RATE_VALUES
    assert view.rate[1] == tuple(value for _, value in held["tokens_per_s"])
    assert max(view.rate[1]) > 13_500 and min(view.rate[1]) < 10_000  # the drop shows, not a diagonal through it
    spacing = {round(b - a, 1) for a, b in zip(view.rate[0], view.rate[0][1:])}
    assert spacing == {RATE_EVERY_S}
    assert view.bands == (("slow", -50.0, 0.0),)


def test_the_journals_minutes_fill_in_before_what_the_console_holds():
    """A console that opened late holds only its own points: the minutes it missed come from the journal,
    but not the minute it shares with them (its median would be drawn before the first of them)."""
    minutes = [Minute(100, "tokens_per_s", 30, 13_000.0, 14_000.0, 14_500.0),
               Minute(101, "tokens_per_s", 30, 13_000.0, 14_100.0, 14_500.0),
               Minute(102, "tokens_per_s", 10, 9_000.0, 9_300.0, 9_500.0)]
    held = ((102 * 60 + 20.0, 9_400.0), (102 * 60 + 22.0, 9_200.0))

    assert merged_points(minutes, "tokens_per_s", held) == ((100 * 60 + 30.0, 14_000.0), (101 * 60 + 30.0, 14_100.0), *held)
    assert merged_points(minutes, "tokens_per_s", ()) == tuple((m.minute * 60 + 30.0, m.median) for m in minutes)


def test_the_time_axis_is_round_clock_times_at_the_windows_scale():
    two_minutes = clock_ticks(WALL_END - 118, WALL_END)
    assert [label for _, label in two_minutes] == ["05:28:30", "05:29:00", "05:29:30", "05:30:00"]
    assert all(at % 30 == 0 for at, _ in two_minutes)
    assert [label for _, label in clock_ticks(WALL_END - 5 * 3600, WALL_END)] == ["01:00", "02:00", "03:00", "04:00", "05:00"]
    assert [label for _, label in clock_ticks(WALL_END - 3 * 86400, WALL_END)] == ["11-30 00:00", "12-01 00:00", "12-02 00:00"]


def high_water(at: float, gpu: int, used_mib: int) -> Entry:
    return Entry(at, "gpu_memory", f"GPU {gpu} memory high-water {used_mib} MiB of {H200_TOTAL_MIB} MiB",
                 {"gpu": gpu, "used_mib": used_mib, "total_mib": H200_TOTAL_MIB})


def verdict(at: float, name: str) -> Entry:
    return Entry(at, "verdict", f"{name}: …", {"verdict": name})


def test_one_samples_high_water_of_eight_gpus_is_one_line_in_gib_and_the_verdicts_follow_it():
    entries = [high_water(1000.0, gpu, 46_000 + gpu * 7_000) for gpu in range(8)]
    entries += [verdict(1001.0, "healthy"), verdict(1050.0, "slow")]

    events = timeline_events(entries)

    assert [entry.kind for _, entry in events] == ["gpu_memory", "verdict", "verdict"]
    assert events[0][1].text == "memory high-water GPUs 0–7: 44.9–92.8 GiB of 140.4 GiB, most on GPU 7"
    assert [index for index, _ in events] == [7, 8, 9]  # each row still names its journal entry


def test_a_gpus_high_water_shows_at_its_latest_and_a_later_burst_is_its_own_line():
    entries = [high_water(1000.0, 0, 40_960), high_water(1000.5, 1, 41_984), verdict(1001.0, "healthy"),
               high_water(1600.0, 0, 51_200), high_water(1601.0, 1, 52_224), verdict(1700.0, "slow"),
               high_water(1800.0, 1, 53_248)]

    events = [(entry.kind, entry.text) for _, entry in timeline_events(entries)]

    assert events == [
        ("verdict", "healthy: …"),
        ("gpu_memory", "memory high-water GPU 0 50.0 GiB of 140.4 GiB"),  # GPU 1's climbed on: its latest is below
        ("verdict", "slow: …"),
        ("gpu_memory", "memory high-water GPU 1 52.0 GiB of 140.4 GiB"),
    ]


def test_a_window_without_held_points_plots_the_journals_minutes():
    """`pulse report`'s and an older console's view: the journal alone."""
    minutes = [Minute(m, "loss", 30, 2.0, 2.5 - m / 1000, 3.0) for m in range(100, 110)]
    view = timeline_view(Window(100 * 60.0, 110 * 60.0, [], minutes))
    assert view.rate_metric is None and len(view.loss[0]) == 10
    assert view.loss[0][-1] == -30.0


def test_the_journal_and_the_report_write_gpu_memory_in_gib(tmp_path):
    window, _ = short_history(tmp_path / "run.sqlite3")
    texts = [e.text for e in window.of("gpu_memory")]
    assert len(texts) == 8 and texts[4] == "GPU 4 memory high-water 123.4 GiB of 140.4 GiB", texts
    report = report_markdown(window, host="local", run="dflash-7b")
    assert "- GPU 4: 123.4 GiB of 140.4 GiB (2025-12-02 05:30:00)" in report and "MiB" not in report
