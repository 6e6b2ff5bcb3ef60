"""Fixtures of the Lua script tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.stores.redis import RedisStore
from scheduler.testing import FakeClock


@pytest.fixture
def rs(redis_url: str, redis_ns: str, clock: FakeClock) -> Iterator[RedisStore]:
    """A ``RedisStore`` of a fresh namespace on the real server, told the time by ``clock``."""
    s = RedisStore(redis_url, redis_ns, clock=clock)
    yield s
    s.close()
