"""The bench's memory reading: the heap it reports moves with what the process holds, by the byte."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from benchlib.procs import heap_mib  # noqa: E402
from benchlib.stats import slope  # noqa: E402


def test_the_heap_reading_follows_large_and_small_allocations_and_their_release():
    before = heap_mib()
    large = [bytes(1000) for _ in range(10_000)]  # malloc's chunks: ~9.5 MiB
    with_large = heap_mib()
    small = [object() for _ in range(100_000)]  # pymalloc's blocks: ~1.5 MiB, and the list
    with_small = heap_mib()
    assert 9.4 < with_large - before < 11
    assert 1.5 < with_small - with_large < 3
    del large, small
    assert heap_mib() - before < 0.5


def test_slope_is_least_squares():
    assert slope([(0, 1.0), (1, 3.0), (2, 5.0)]) == 2.0
    assert slope([(0, 0.0), (1, 1.0), (2, 0.0), (3, 1.0)]) == pytest.approx(0.2)
    assert slope([(1, 2.0)]) is None and slope([(1, 2.0), (1, 3.0)]) is None
