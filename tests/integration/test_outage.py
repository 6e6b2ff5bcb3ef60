"""Redis goes away and comes back: a replica keeps running, reconnects with backoff and
resumes claiming without a restart (docs/shared-mode.md); with appendfsync always nothing
is lost."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler import Client, Scheduler, task
from scheduler.embedded import EmbeddedRedis
from scheduler.stores.redis import RedisStore, StoreUnavailableError

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ran: dict[str, threading.Event] = {}


@task("tests.outage.mark")
def mark(name: str) -> None:
    ran.setdefault(name, threading.Event()).set()


def test_a_replica_resumes_after_redis_restarts(redis_ns):
    with EmbeddedRedis(appendonly=True, appendfsync="always") as server:
        store = RedisStore(server.url, redis_ns, lease=2, resync=0.5)
        with Scheduler(2, store=store) as engine, Client(server.url, namespace=redis_ns) as c:
            c.enqueue("tests.outage.mark", kwargs={"name": "before"}, delay=0)
            assert ran.setdefault("before", threading.Event()).wait(5)
            c.enqueue("tests.outage.mark", kwargs={"name": "kept"}, delay=1.5)  # survives
            server.kill()
            with pytest.raises(StoreUnavailableError):
                c.enqueue("tests.outage.mark", kwargs={"name": "refused"}, delay=0)
            time.sleep(1.0)  # the replica meets the outage
            server.restart()
            back = time.monotonic()
            c.enqueue("tests.outage.mark", kwargs={"name": "after"}, delay=0)
            assert ran.setdefault("after", threading.Event()).wait(10)
            assert ran.setdefault("kept", threading.Event()).wait(10)  # AOF kept it
            resumed = time.monotonic() - back
            assert not engine.closed
        store.close()
    assert resumed < 5.0, resumed
