"""One duration format for every pane, action step and fleet row."""

import pytest

from console.units import format_duration


@pytest.mark.parametrize(
    ("seconds", "spaced", "compact"),
    [
        (0, "0s", "0s"),
        (42.9, "42s", "42s"),
        (-5, "0s", "0s"),
        (7 * 60 + 3, "7m 03s", "7m03s"),
        (5 * 3600 + 12 * 60 + 59, "5h 12m", "5h12m"),
        (2 * 86400 + 4 * 3600 + 59 * 60, "2d 4h", "2d4h"),
    ],
)
def test_format_duration_shows_the_two_largest_units(seconds, spaced, compact):
    assert format_duration(seconds) == spaced
    assert format_duration(seconds, compact=True) == compact


@pytest.mark.parametrize(("seconds", "text"), [(0.3, "0.3s"), (0.25, "0.2s"), (1.0, "1s"), (2.96, "3s"), (9.9, "9.9s"), (12.4, "12s"), (0, "0s")])
def test_tenths_below_ten_seconds_where_they_are_the_fact(seconds, text):
    """A run's rhythm (it writes every 0.3 s) keeps its tenths; whole seconds and longer spans read as everywhere."""
    assert format_duration(seconds, tenths=True) == text


def test_memory_and_index_ranges_read_one_way():
    from console.units import format_gib, format_indices, spread

    assert format_gib(101_863) == "99.5 GiB"
    assert spread([118.54, 123.4], "{:.1f}") == "118.5–123.4" and spread([2.0, 2.04], "{:.1f}") == "2.0" and spread([], "{:.0f}") == "—"
    assert format_indices([4, 0, 1, 2, 3, 6]) == "0–4, 6" and format_indices([5, 6]) == "5, 6"
