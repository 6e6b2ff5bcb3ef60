"""The calendar (cron) store tests (tests/calendar/test_calendar_stores.py) on the
cluster and on shards: a replica plans calendar series per shard (claim.lua's ``plan``
list comes back from the shard that holds the job, and plan.lua runs there)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.stores.redis.sharding.sharded import open_store
from tests.calendar.test_calendar_stores import *  # noqa: F403  (every test, re-run here)

pytestmark = [pytest.mark.redis]


@pytest.fixture
def store(shared_redis_cluster, clock, redis_ns) -> Iterator[object]:  # noqa: F811
    """Overrides conftest's ``store``: 4 shards on the local cluster."""
    s = open_store(shared_redis_cluster.url + "/", redis_ns, clock=clock, shards=4)
    yield s
    s.close()
