"""Fixtures the integration tests share: the store of a test's own namespace on the
private redis-server (``ns_store``) and the ``duetime`` command pointed at it (``ns_cli``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from scheduler.cli import main
from scheduler.stores.redis import RedisStore


@pytest.fixture
def ns_store(redis_url: str, redis_ns: str) -> Iterator[RedisStore]:
    """A ``RedisStore`` of the test's namespace, closed after it."""
    s = RedisStore(redis_url, redis_ns)
    yield s
    s.close()


@pytest.fixture
def ns_cli(redis_url: str, redis_ns: str) -> Callable[..., Result]:
    """``duetime <args>`` in process (click's runner), on the test's namespace through
    ``DUETIME_REDIS_URL`` and ``DUETIME_NAMESPACE``; keywords go to ``invoke`` (input=)."""
    runner = CliRunner()
    env = {"DUETIME_REDIS_URL": redis_url, "DUETIME_NAMESPACE": redis_ns}

    def invoke(*args: str, **kw: Any) -> Result:
        return runner.invoke(main, list(args), env=env, **kw)

    return invoke
