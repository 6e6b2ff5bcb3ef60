"""Sequences the long differential run (``-m model_full``) found and that are not reduced
to a minimal test yet: each replayed, step for step as hypothesis printed it, on the
in-process store and a real ``redis-server`` (``tests/model/found/*.py.txt``, the first
line a ``#`` comment saying what diverged).

Each is ``xfail(strict=True)`` until the stores agree on it: then reduce it to a test in
``test_divergences.py`` and delete its file (none waits today). Issue 31: one semantics.
"""

from __future__ import annotations

import pathlib

import pytest

from scheduler.flow import Limit
from scheduler.model import After, Cron, Delivery, Every, Misfire, Overlap
from tests.model.test_differential import Differential, real_redis_store

FOUND = pathlib.Path(__file__).parent / "found"


def replay(steps: str, redis_url: str) -> None:
    state = Differential(real_redis_store(redis_url))
    names = {"state": state, "After": After, "Cron": Cron, "Delivery": Delivery}
    names |= {"Every": Every, "Misfire": Misfire, "Overlap": Overlap, "Limit": Limit}
    try:
        exec(compile(steps, "steps", "exec"), names)  # noqa: S102 - a test's own data file
    finally:
        state.teardown()


def found() -> list[object]:
    return [
        pytest.param(
            path,
            id=path.name.removesuffix(".py.txt"),
            marks=pytest.mark.xfail(
                strict=True, reason=path.read_text().partition("\n")[0].lstrip("# ")
            ),
        )
        for path in sorted(FOUND.glob("*.py.txt"))
    ]


@pytest.mark.redis
@pytest.mark.parametrize("path", found())
def test_found_sequence(path: pathlib.Path, redis_url: str) -> None:
    replay(path.read_text(), redis_url)
