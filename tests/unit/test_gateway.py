"""gateway.py without a server: what a round trip sends, how a NOSCRIPT is answered
(that script loaded, those calls alone sent again, once), WAIT's answer, errors raised or
returned; the sync and async executors alike, on a stand-in for redis-py's client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from scheduler.stores.redis.protocol import gateway
from scheduler.stores.redis.protocol.gateway import Lua, Trip, Wait

A, B = Lua("return 'a'"), Lua("return 'b'")
REFUSED = "ERR bad input"


class Server:
    """The script cache and the commands each connection sent."""

    def __init__(self, loaded: set[str]) -> None:
        self.loaded = loaded
        self.sent: list[tuple[Any, ...]] = []
        self.loads = 0

    def answer(self, command: tuple[Any, ...]) -> Any:
        self.sent.append(command)
        if command[0] == "WAIT":
            return 1
        _, sha, nkeys, *rest = command
        if sha not in self.loaded:
            return redis.exceptions.NoScriptError("NOSCRIPT No matching script.")
        if REFUSED in rest:
            return redis.exceptions.ResponseError(REFUSED)
        return (sha[:4], *rest[nkeys:])

    def load(self, text: str) -> str:
        self.loads += 1
        self.loaded.add(Lua(text).sha)
        return Lua(text).sha


class Pipe:
    def __init__(self, server: Server) -> None:
        self.server, self.queued = server, []

    def __enter__(self) -> Pipe:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    async def __aenter__(self) -> Pipe:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    def execute_command(self, *command: Any) -> None:
        self.queued.append(command)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        assert not raise_on_error
        return [self.server.answer(c) for c in self.queued]


class Client:
    def __init__(self, server: Server) -> None:
        self.server = server

    def pipeline(self, transaction: bool = True) -> Pipe:
        assert not transaction
        return Pipe(self.server)

    def execute_command(self, *command: Any) -> Any:
        reply = self.server.answer(command)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def script_load(self, text: str) -> str:
        return self.server.load(text)


class AsyncPipe(Pipe):
    async def execute(self, raise_on_error: bool = True) -> list[Any]:  # type: ignore[override]
        return Pipe.execute(self, raise_on_error)


class AsyncClient(Client):
    def pipeline(self, transaction: bool = True) -> AsyncPipe:
        return AsyncPipe(self.server)

    async def execute_command(self, *command: Any) -> Any:  # type: ignore[override]
        return Client.execute_command(self, *command)

    async def script_load(self, text: str) -> str:  # type: ignore[override]
        return Client.script_load(self, text)


def runners() -> list[Any]:
    def sync(server: Server, trip: Trip) -> list[Any]:
        return gateway.run(Client(server), trip)

    def on_a_loop(server: Server, trip: Trip) -> list[Any]:
        return asyncio.run(gateway.arun(AsyncClient(server), trip))

    return [sync, on_a_loop]


@pytest.fixture(params=runners(), ids=["run", "arun"])
def send(request: pytest.FixtureRequest) -> Any:
    return request.param


def test_a_lone_call_is_one_plain_command_and_a_noscript_loads_it(send):
    server = Server(set())
    assert send(server, Trip([(A, ["x"])], ["k"])) == [(A.sha[:4], "x")]
    assert server.sent == [("EVALSHA", A.sha, 1, "k", "x")] * 2 and server.loads == 1


def test_only_the_calls_answered_noscript_are_sent_again(send):
    server = Server({A.sha})
    seen: list[Any] = []
    trip = Trip([(A, [1]), (B, [2]), (A, [3]), (B, [4])], ["k"], Wait(2, 50, seen.append))
    assert send(server, trip) == [(A.sha[:4], 1), (B.sha[:4], 2), (A.sha[:4], 3), (B.sha[:4], 4)]
    again = [c for c in server.sent[5:] if c[0] != "WAIT"]
    assert [c[-1] for c in again] == [2, 4] and server.loads == 1  # B loaded once
    assert seen == [1] and server.sent[4] == ("WAIT", 2, 50) == server.sent[-1]


def test_a_second_noscript_is_returned_not_retried(send):
    server = Server(set())
    server.load = lambda text: Lua(text).sha  # type: ignore[method-assign]  # a lost load
    (reply,) = send(server, Trip([(A, [])], raises=False))
    assert isinstance(reply, redis.exceptions.NoScriptError) and len(server.sent) == 2


def test_errors_are_raised_after_the_wait_check_or_returned_in_place(send):
    server, seen = Server({A.sha}), []
    calls = [(A, [REFUSED]), (A, ["ok"])]
    with pytest.raises(redis.exceptions.ResponseError, match=REFUSED):
        send(server, Trip(calls, wait=Wait(1, 10, seen.append)))
    assert seen == [1]
    first, second = send(server, Trip(calls, raises=False))
    assert isinstance(first, redis.exceptions.ResponseError) and second == (A.sha[:4], "ok")


def test_the_pure_reading_splits_off_wait_and_names_the_calls_to_resend():
    trip = Trip([(A, []), (B, [])], wait=Wait(1, 10, lambda acked: None))
    assert gateway.commands(trip, [1])[-1] == ("WAIT", 1, 10)
    replies: list[Any] = [None, None]
    noscript = redis.exceptions.NoScriptError("NOSCRIPT")
    again, acked = gateway.read(trip, [0, 1], ["a", noscript, 0], replies, retry=True)
    assert (again, acked, replies) == ([1], 0, ["a", noscript])
    assert gateway.read(trip, [1], [noscript, 1], replies, retry=False) == ([], 1)
    assert gateway.to_load(Trip([(A, []), (B, []), (A, [])]), [0, 1, 2]) == [A, B]
