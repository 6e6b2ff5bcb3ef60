"""Shared fixtures: a fake clock, stores (parametrised: the contract suite runs on each),
and engines built on the fake clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from scheduler import JobScheduler, RecurringJobScheduler
from scheduler.engine import Scheduler
from scheduler.stores.memory import MemoryStore
from scheduler.testing import FakeClock
from tests.cluster_fixtures import shared_redis_cluster  # noqa: F401  (session: one cluster)
from tests.fakeredis_fixtures import fakeredis_client, skip_unsupported
from tests.redis_fixtures import *  # noqa: F403  (redis_server, redis_url, redis_ns, ...)
from tests.sentinel_fixtures import lone_sentinel  # noqa: F401  (a module's: a sentinel's port)

START = 1_000.0

collect_ignore = ["bench"]  # benchmarks are run by hand (tests/bench/README.md), not by pytest


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=START)


STORE_KINDS = [
    "memory",
    pytest.param("fakeredis", marks=pytest.mark.fakeredis),  # the Lua, with no server
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, clock: FakeClock):
    """Each store kind, on the fake clock (a Redis store is then told the time instead of
    reading Redis TIME), in a fresh namespace. ``fakeredis``: a RedisStore on an
    in-process fakeredis server (tests/fakeredis_fixtures.py), no redis-server needed."""
    if request.param == "memory":
        return MemoryStore(clock)
    from scheduler.stores.redis import RedisStore

    if request.param == "fakeredis":
        skip_unsupported(request)
        s = RedisStore(fakeredis_client(), "fake", clock=clock)
        request.addfinalizer(s.close)
        return s
    url = request.getfixturevalue("redis_url")
    ns = request.getfixturevalue("redis_ns")
    s = RedisStore(url, ns, clock=clock)
    request.addfinalizer(s.close)
    return s


@pytest.fixture
def once(clock: FakeClock) -> Iterator[JobScheduler]:
    """A JobScheduler with 2 workers on the fake clock."""
    with JobScheduler(num_workers=2, clock=clock) as s:
        yield s


@pytest.fixture
def recurring(clock: FakeClock) -> Iterator[RecurringJobScheduler]:
    """A RecurringJobScheduler with 2 workers on the fake clock."""
    with RecurringJobScheduler(num_workers=2, clock=clock) as s:
        yield s


@pytest.fixture
def make_engine(clock: FakeClock) -> Iterator[Callable[..., Scheduler]]:
    """Build engines on the fake clock; all are shut down at the end of the test."""
    made: list[Scheduler] = []

    def make(num_workers: int = 1, **kw: object) -> Scheduler:
        kw.setdefault("clock", clock)
        engine = Scheduler(num_workers, **kw)  # type: ignore[arg-type]
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.shutdown(wait=True, timeout=5)
