"""gateway.py without a server: what a round trip sends, how a server that lacks what a
call names is answered (a NOSCRIPT: that script loaded; "Function not found": that library
loaded; FCALL refused: scripts from then on; those calls alone sent again), WAIT's answer,
errors raised or returned; the sync and async executors alike, on a stand-in for redis-py's
client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from scheduler.stores.redis.protocol import gateway
from scheduler.stores.redis.protocol.gateway import Lua, Trip, Wait

A, B = Lua("return 'a'"), Lua("return 'b'")  # texts without a library: always EVALSHA
F = Lua("return 'f'", function="lib_f", library="#!lua name=lib_f\n...")  # a lua/ script's
REFUSED = "ERR bad input"


class Server:
    """The script cache, the libraries, and the commands each connection sent; ``fcall``:
    False for a server that refuses FCALL (Redis 6, or an ACL without it)."""

    def __init__(self, loaded: set[str], functions: frozenset[str] = frozenset(), fcall=True):
        self.loaded, self.functions, self.fcall = loaded, set(functions), fcall
        self.sent: list[tuple[Any, ...]] = []
        self.loads = 0

    def answer(self, command: tuple[Any, ...]) -> Any:
        # as the wire carries them: text arguments arrive as bytes (the gateway encodes them)
        command = tuple(a.decode() if isinstance(a, bytes) else a for a in command)
        self.sent.append(command)
        if command[0] == "WAIT":
            return 1
        verb, name, nkeys, *rest = command
        if verb == "FCALL" and not self.fcall:
            return redis.exceptions.ResponseError("unknown command 'FCALL', with args ...")
        if verb == "FCALL" and name not in self.functions:
            return redis.exceptions.ResponseError("Function not found")
        if verb == "EVALSHA" and name not in self.loaded:
            return redis.exceptions.NoScriptError("NOSCRIPT No matching script.")
        if REFUSED in rest:
            return redis.exceptions.ResponseError(REFUSED)
        return (name[:4], *rest[nkeys:])

    def load(self, text: str) -> str:
        self.loads += 1
        self.loaded.add(Lua(text).sha)
        return Lua(text).sha

    def function_load(self, code: str) -> str:
        if not self.fcall:
            raise redis.exceptions.ResponseError("unknown command 'FUNCTION'")
        self.loads += 1
        name = code.split("name=", 1)[1].split("\n", 1)[0]
        self.functions.add(name)
        return name


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

    def function_load(self, code: str) -> str:
        return self.server.function_load(code)


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

    async def function_load(self, code: str) -> str:  # type: ignore[override]
        return Client.function_load(self, code)


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


def test_text_arguments_go_as_utf8_bytes_and_numbers_as_they_are():
    """redis-py passes bytes through; its own encoding of a str costs ~4x a str.encode:
    keys and ARGV are encoded once, here. The verb, the function and the key count stay
    as they are (redis-py reads them: the command's name, a cluster's key positions)."""
    client = Client(Server(set()))
    cmd = gateway.command(client, F, ["k"], ["x", "é", 3, b"raw"])
    assert cmd == ("FCALL", "lib_f", 1, b"k", b"x", "é".encode(), 3, b"raw")


def test_only_the_calls_answered_noscript_are_sent_again(send):
    server = Server({A.sha})
    seen: list[Any] = []
    trip = Trip([(A, [1]), (B, [2]), (A, [3]), (B, [4])], ["k"], Wait(2, 50, seen.append))
    assert send(server, trip) == [(A.sha[:4], 1), (B.sha[:4], 2), (A.sha[:4], 3), (B.sha[:4], 4)]
    again = [c for c in server.sent[5:] if c[0] != "WAIT"]
    assert [c[-1] for c in again] == [2, 4] and server.loads == 1  # B loaded once
    assert seen == [1] and server.sent[4] == ("WAIT", 2, 50) == server.sent[-1]


def test_a_call_still_not_found_after_its_last_send_is_returned_not_retried(send):
    server = Server(set())
    server.load = lambda text: Lua(text).sha  # type: ignore[method-assign]  # a lost load
    (reply,) = send(server, Trip([(A, [])], raises=False))
    assert isinstance(reply, redis.exceptions.NoScriptError)
    assert len(server.sent) == gateway.ATTEMPTS


def test_a_script_with_a_library_is_sent_as_fcall_and_its_library_loaded(send):
    server = Server(set())
    assert send(server, Trip([(F, ["x"])], ["k"])) == [("lib_", "x")]
    assert server.sent == [("FCALL", "lib_f", 1, "k", "x")] * 2 and server.functions == {"lib_f"}
    server.sent.clear()
    trip = Trip([(F, [1]), (A, [2])], ["k"], Wait(1, 10, lambda acked: None))
    assert send(server, trip) == [("lib_", 1), (A.sha[:4], 2)]  # A: NOSCRIPT, loaded
    assert [c[0] for c in server.sent] == ["FCALL", "EVALSHA", "WAIT", "EVALSHA", "WAIT"]


def test_a_server_that_refuses_fcall_gets_scripts_from_then_on(send):
    server = Server(set(), fcall=False)
    assert send(server, Trip([(F, ["x"])], ["k"])) == [(F.sha[:4], "x")]
    assert [c[0] for c in server.sent] == ["FCALL", "EVALSHA", "EVALSHA"]  # refused, NOSCRIPT
    server.sent.clear()
    assert send(server, Trip([(F, [1]), (F, [2])])) == [(F.sha[:4], 1), (F.sha[:4], 2)]
    assert [c[0] for c in server.sent] == ["FCALL", "FCALL", "EVALSHA", "EVALSHA"]


def test_a_client_told_to_send_scripts_sends_no_fcall_until_then():
    client = Client(Server({F.sha}, {"lib_f"}))
    gateway.send_scripts(client)
    assert gateway.run(client, Trip([(F, [1])])) == [(F.sha[:4], 1)]
    gateway.send_scripts(client, -1.0)  # over
    assert gateway.run(client, Trip([(F, [2])])) == [("lib_", 2)]
    assert [c[0] for c in client.server.sent] == ["EVALSHA", "FCALL"]


def test_a_full_redis_that_refuses_a_library_gets_the_script_for_a_while(send, monkeypatch):
    """FUNCTION LOAD is a write, refused by a full ``noeviction`` Redis; SCRIPT LOAD is
    not: the call goes as a script, and so do the client's calls for ``FULL_S``."""
    server = Server(set())

    def full(code: str) -> str:
        raise redis.exceptions.OutOfMemoryError("OOM command not allowed when used memory > ...")

    server.function_load = full  # type: ignore[method-assign]
    assert send(server, Trip([(F, ["x"])])) == [(F.sha[:4], "x")]
    assert [c[0] for c in server.sent] == ["FCALL", "EVALSHA", "EVALSHA"]  # NOSCRIPT, loaded


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
    assert gateway.commands(Client(Server(set())), trip, [1])[-1] == ("WAIT", 1, 10)
    replies: list[Any] = [None, None]
    noscript = redis.exceptions.NoScriptError("NOSCRIPT")
    again, acked = gateway.read(trip, [0, 1], ["a", noscript, 0], replies, retry=True)
    assert (again, acked, replies) == ([1], 0, ["a", noscript])
    assert gateway.read(trip, [1], [noscript, 1], replies, retry=False) == ([], 1)
    lost = [noscript, noscript, noscript]
    assert gateway.to_load(Trip([(A, []), (B, []), (A, [])]), [0, 1, 2], lost) == [
        (A, "script"),
        (B, "script"),
    ]
    assert gateway.lacks(redis.exceptions.ResponseError("Function not found")) == "function"
    assert gateway.lacks(redis.exceptions.ResponseError(REFUSED)) is None
    for refused in (
        "unknown command 'FCALL', with args beginning with: ",  # Redis 7
        "unknown command `FCALL`, with args beginning with: ",  # Redis 6
        "this user has no permissions to run the 'fcall' command",  # an ACL
    ):
        assert gateway.lacks(redis.exceptions.ResponseError(refused)) == "fcall"
