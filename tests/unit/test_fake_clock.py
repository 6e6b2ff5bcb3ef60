"""The public test kit's FakeClock refuses what would break every later due decision."""

from __future__ import annotations

import math

import pytest

from scheduler.testing import FakeClock


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_clock_moves_only_by_finite_seconds(bad):
    """``advance(nan)`` was accepted: the clock read NaN, and the next schedule failed
    deep inside ("cannot convert float NaN to integer")."""
    clock = FakeClock(10)
    with pytest.raises(ValueError, match="must be finite"):
        clock.advance(bad)
    with pytest.raises(ValueError, match="must be finite"):
        FakeClock(bad)
    assert clock.now() == 10.0


@pytest.mark.parametrize("bad", ["5", None, True])
def test_a_clock_moves_only_by_a_number(bad):
    with pytest.raises(TypeError, match="must be a number of seconds"):
        FakeClock().advance(bad)  # type: ignore[arg-type]


def test_a_clock_cannot_go_back_and_moves_by_what_it_is_told():
    clock = FakeClock()
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)
    clock.advance(2.5)
    clock.advance(0)
    assert clock.now() == clock.wall() == 2.5
