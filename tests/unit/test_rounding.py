"""Issue 13: due instants are rounded up to the millisecond, never down (a fractional-ms
delay used to start up to 0.5 ms early), float noise never adds a millisecond, and an
interval the shared store cannot honour (below 1 ms) is refused with what is accepted."""

from __future__ import annotations

import pytest

from scheduler.model import After, At, Every, JobSpec, TaskRef
from scheduler.stores.redis.protocol import definitions


def args(schedule):
    spec = JobSpec("j", TaskRef("t"), schedule)
    return definitions.add_args(spec, 65536, lambda: 0)


@pytest.mark.parametrize(
    ("seconds", "ms"),
    [(0.3, 300), (1.0004, 1001), (1.0005, 1001), (1.0001, 1001), (2.0, 2000), (0.0, 0)],
)
def test_due_instants_and_delays_round_up_to_the_millisecond(seconds, ms):
    assert definitions.ms_up(seconds) == ms
    assert args(After(seconds))[4] == ms
    assert args(At(1_700_000_000 + seconds))[4] == 1_700_000_000_000 + ms


def test_an_anchor_rounds_up_too():
    assert args(Every(1.0, 1_700_000_000.0004))[5] == 1_700_000_000_001


@pytest.mark.parametrize("interval", [0.0005, 1e-9])
def test_a_sub_millisecond_interval_is_refused_with_what_is_accepted(interval):
    with pytest.raises(ValueError, match=r"below 1 ms.*at least 0\.001 s"):
        args(Every(interval))
