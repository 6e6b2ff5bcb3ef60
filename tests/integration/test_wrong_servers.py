"""A URL that reaches the wrong thing: a database the server does not have, a plain Redis
named as a sentinel, a sentinel named as a plain Redis, something that is not Redis at
all, a server that never answers.
The library raised redis-py's own exceptions there (``ResponseError: DB index is out of
range``, ``InvalidResponse: Protocol error, got "H"``, ``TimeoutError`` from
``Scheduler``'s server check), where every other connection failure is one of duetime's
errors with what to do; the CLI said "answered with an error"."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from scheduler import AsyncClient, Client, RedisStore, Scheduler
from scheduler.cli import main
from scheduler.errors import StoreConfigError
from scheduler.stores.redis import StoreUnavailableError

pytestmark = pytest.mark.redis


@pytest.fixture
def not_redis() -> Iterator[str]:
    """A TCP server that answers anything with an HTTP error (an address typed wrong)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def silent() -> Iterator[str]:
    """A TCP server that accepts and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    server.close()


def cases(
    redis_url: str, not_redis: str, lone_sentinel: str
) -> list[tuple[str, type[Exception], str]]:
    base = redis_url.rsplit("/", 1)[0]
    sentinel = base.replace("redis://", "redis+sentinel://") + "/mymaster"
    return [
        (f"{base}/99", StoreConfigError, "has no such database"),
        (sentinel, StoreConfigError, "names a Redis server, not a sentinel"),
        (lone_sentinel, StoreConfigError, "names a Redis Sentinel, not a Redis server"),
        (f"{lone_sentinel[:-2]}/3", StoreConfigError, "does not know SELECT"),
        (not_redis, StoreUnavailableError, "is not Redis"),
    ]


def test_the_library_says_what_is_wrong_with_the_url(redis_url, redis_ns, not_redis, lone_sentinel):
    for url, error, said in cases(redis_url, not_redis, lone_sentinel):
        with pytest.raises(error, match=said), Client(url, namespace=redis_ns) as client:
            client.enqueue("t.x", delay=60)
        with pytest.raises(error, match=said):
            Scheduler(1, store=RedisStore(url, redis_ns))

        async def enqueue(url: str = url) -> None:
            async with AsyncClient(url, namespace=redis_ns) as client:
                await client.enqueue("t.x", delay=60)

        with pytest.raises(error, match=said):
            asyncio.run(enqueue())


def test_the_cli_says_it_in_one_line(redis_url, redis_ns, not_redis, lone_sentinel):
    for url, _, said in cases(redis_url, not_redis, lone_sentinel):
        result = CliRunner().invoke(main, ["stats", "--redis", url, "-n", redis_ns])
        assert result.exit_code == 3 and said in result.output, result.output
        assert "answered with an error" not in result.output


def test_a_server_that_never_answers_is_unavailable_not_a_redis_timeout(silent, redis_ns):
    import redis

    client = redis.Redis.from_url(silent, decode_responses=True, socket_timeout=0.3)
    store = RedisStore(client, redis_ns)
    with pytest.raises(StoreUnavailableError, match="cannot reach Redis"):
        Scheduler(1, store=store)
    store.close()


def test_a_database_that_is_not_a_number_is_refused(redis_url, redis_ns):
    """redis-py took ``redis://host/abc`` as database 0: a typo wrote elsewhere."""
    from scheduler.stores.redis.protocol.urls import RedisURLError

    with pytest.raises(RedisURLError, match="must be a number"):
        Client(redis_url.rsplit("/", 1)[0] + "/abc", namespace=redis_ns).enqueue("t.x")
    for fine in ("", "/", "/3"):
        Client(redis_url.rsplit("/", 1)[0] + fine, namespace=redis_ns).close()


def test_a_wrong_password_is_named_as_such_by_the_library(redis_url, redis_ns, redis_client):
    """The library said "cannot reach Redis ...; is it running?" for a wrong password
    (redis-py's AuthenticationError is a ConnectionError); the CLI named it already."""
    user = f"w-{redis_ns}"
    redis_client.execute_command("ACL", "SETUSER", user, "on", ">right", "~*", "+@all")
    try:
        url = redis_url.replace("redis://", f"redis://{user}:wrong@")
        with pytest.raises(StoreUnavailableError, match="refused the credentials") as caught:
            Client(url, namespace=redis_ns).enqueue("t.x", delay=60)
        assert "wrong" not in str(caught.value)  # the password stays masked
    finally:
        redis_client.execute_command("ACL", "DELUSER", user)
