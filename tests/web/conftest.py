"""Fixtures of the web console's tests: a console app over a fresh namespace of the
session's redis-server, and a starlette TestClient on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install -e '.[web]')")


@pytest.fixture
def console_factory(redis_url: str, redis_ns: str) -> Iterator[Callable[..., Any]]:
    """``make(**auth)`` -> (TestClient, Console) over namespace ``redis_ns``."""
    from starlette.testclient import TestClient

    from scheduler.stores.redis import open_store
    from scheduler.stores.redis.protocol import urls
    from scheduler.web import Console, create_app
    from scheduler.web.auth import Auth

    stores = []

    def make(
        *, redact: bool = False, url: str | None = None, shards: int | None = None, **auth: Any
    ) -> Any:
        store = open_store(url or redis_url, redis_ns, shards=shards)
        store.url = urls.safe(url or redis_url)
        stores.append(store)
        console = Console({redis_ns: store}, url=store.url, auth=Auth(**auth), redact=redact)
        return TestClient(create_app(console)), console

    yield make
    for store in stores:
        store.close()
