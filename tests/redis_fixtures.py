"""Pytest fixtures backed by a real Redis server (``from tests.redis_fixtures import *``).

- ``redis_server`` (session): one server for the whole run: an ``EmbeddedRedis``, or a
  testcontainers Redis when no local binary exists but Docker and testcontainers do.
- ``redis_url`` / ``redis_ns`` (function): the session server's URL and a unique namespace
  (key prefix) per test. The namespace is the isolation: nothing ever runs FLUSHALL/FLUSHDB.
- ``redis_client`` (function): a ``redis.Redis`` on ``redis_url`` (bytes), closed afterwards.
- ``private_redis`` (function): an ``EmbeddedRedis`` of the test's own, to kill, restart or
  reconfigure; stopped at teardown.

With no server binary to be had, these skip the test, except under CI (``$CI`` set),
where they fail: CI must never pass by silently skipping every Redis test. A server that
is found but will not start (or a wrong ``$DUETIME_REDIS_SERVER``) is an error, not a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import pytest

from scheduler.embedded import INSTALL_HINT, EmbeddedRedis, find_server

if TYPE_CHECKING:
    import redis

__all__ = ["redis_server", "redis_url", "redis_ns", "redis_client", "private_redis"]


class RedisServer(Protocol):
    """What ``redis_server`` yields: an ``EmbeddedRedis`` or the testcontainers stand-in."""

    @property
    def url(self) -> str: ...


def in_ci() -> bool:
    """True when ``$CI`` is set to anything but an explicit false."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI, where a missing server is a setup bug."""
    if in_ci():
        pytest.fail(f"CI is set, so no Redis test may be skipped: {reason}", pytrace=False)
    pytest.skip(reason)


def _docker_usable() -> bool:
    """True when testcontainers is importable and a Docker daemon answers (one quick
    ping per run, shared with the container tier: tests/container_fixtures.py)."""
    from tests.container_fixtures import docker_problem

    return docker_problem() is None


class _ContainerRedis:
    """A Redis in a Docker container (testcontainers), configured like ``EmbeddedRedis``.

    The container's 6379 is published on a random host port: the host's 6379 is untouched.
    """

    def __init__(self) -> None:
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # an older testcontainers
            from testcontainers.redis import RedisContainer

        self._container: Any = RedisContainer("redis:7").with_command(
            "redis-server --save '' --appendonly yes --maxmemory-policy noeviction"
        )
        self._container.start()
        host = self._container.get_container_host_ip()
        self.port = int(self._container.get_exposed_port(6379))
        self.url = f"redis://{host}:{self.port}/0"

    def stop(self) -> None:
        self._container.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One Redis server shared by the whole test run."""
    if find_server() is None:
        if not _docker_usable():
            unavailable(f"no redis-server found: {INSTALL_HINT}")
        container = _ContainerRedis()
        try:
            yield container
        finally:
            container.stop()
        return
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The shared server's URL; pair it with ``redis_ns`` to get a namespace of one's own."""
    return redis_server.url


@pytest.fixture
def redis_ns() -> str:
    """A namespace (key prefix) no other test uses, e.g. ``t1a2b3c4d5e``."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A ``redis.Redis`` client (bytes replies) on the shared server; closed afterwards."""
    try:
        import redis
    except ImportError:
        unavailable("redis-py is not installed: pip install 'redis[hiredis]' (or .[test])")
    client = redis.Redis.from_url(redis_url, decode_responses=False)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def private_redis() -> Iterator[EmbeddedRedis]:
    """A started ``EmbeddedRedis`` for this test alone (kill/restart freely); stopped after."""
    if find_server() is None:
        unavailable(f"no redis-server found: {INSTALL_HINT}")
    server = EmbeddedRedis()
    try:
        yield server.start()
    finally:
        server.stop()
