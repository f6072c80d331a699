"""The one retry schedule: doubling waits, capped, each jittered down by at most JITTER."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.backoff import JITTER, Backoff


@given(
    first=st.floats(0.01, 10),
    ratio=st.floats(1, 100),
    seed=st.integers(0, 2**32),
    attempts=st.integers(1, 30),
)
def test_waits_double_up_to_the_limit_each_jittered(first, ratio, seed, attempts):
    limit = first * ratio
    backoff = Backoff(first, limit, rng=random.Random(seed))
    nominal = first
    for _ in range(attempts):
        wait = backoff.next()
        assert (1 - JITTER) * nominal <= wait <= nominal
        assert wait <= limit
        nominal = min(nominal * 2, limit)


def test_reset_starts_again_from_the_first_wait():
    backoff = Backoff(0.5, 15.0, rng=random.Random(1))
    for _ in range(8):
        backoff.next()
    assert backoff.next() > 0.5  # well past the first wait by now
    backoff.reset()
    assert (1 - JITTER) * 0.5 <= backoff.next() <= 0.5


def test_waits_are_jittered_apart():
    """Consoles that lost the same host at once do not all come back at the same instant."""
    waits = {Backoff(1.0, 1.0, rng=random.Random(seed)).next() for seed in range(20)}
    assert len(waits) == 20


@pytest.mark.parametrize(("first", "limit"), [(0, 1), (-1, 1), (2, 1)])
def test_a_schedule_that_cannot_work_is_refused(first, limit):
    with pytest.raises(ValueError, match="0 < first <= limit"):
        Backoff(first, limit)
