"""Sequences the long differential run (``-m model_full``) found and that are not reduced
to a minimal test yet: each replayed, step for step as hypothesis printed it, on the
in-process store and a real ``redis-server`` (``tests/model/found/*.py.txt``).

Each is ``xfail(strict=True)`` until the stores agree on it: then reduce it to a test in
``test_divergences.py`` (or drop it when a fix made it pass) and delete its file. Issue
31: one semantics.
"""

from __future__ import annotations

import pathlib

import pytest

from scheduler.model import After, Cron, Delivery, Every, Misfire, Overlap
from tests.model.test_differential import Differential, real_redis_store

FOUND = pathlib.Path(__file__).parent / "found"


def replay(steps: str, redis_url: str) -> None:
    state = Differential(real_redis_store(redis_url))
    names = {"state": state, "After": After, "Cron": Cron, "Delivery": Delivery}
    names |= {"Every": Every, "Misfire": Misfire, "Overlap": Overlap}
    try:
        exec(compile(steps, "steps", "exec"), names)  # noqa: S102 - a test's own data file
    finally:
        state.teardown()


@pytest.mark.redis
@pytest.mark.xfail(
    strict=True,
    reason="issue 31: an Every(2), overlap='queue' job handed back by a release; memory "
    "claims its queued occurrence, Redis nothing (next due in 1.743 s)",
)
def test_overlap_queue_after_release(redis_url: str) -> None:
    replay((FOUND / "overlap_queue_after_release.py.txt").read_text(), redis_url)
