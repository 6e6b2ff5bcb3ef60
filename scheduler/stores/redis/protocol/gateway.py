"""The one place a Lua script is sent to Redis: every script call of the sync store
(``RedisStore``, the shards of a ``ShardedStore``) and of the async one (``AsyncStore``)
goes through here, and no other module names the command that runs a cached script.

A round trip is described without I/O (``Trip``: the ``(script, argv)`` calls, their
routing keys, an optional ``WAIT``, whether an error reply raises), and its replies are
read without I/O (``read``, ``settle``); two small executors, ``run`` (sync) and ``arun``
(``redis.asyncio``), only send the commands. The rules, the same for both:

- a script is named by its SHA1 (no ``SCRIPT EXISTS`` first); a call answered NOSCRIPT
  did not run: its script is loaded (``SCRIPT LOAD``: every primary of a cluster) and
  that call alone is sent again, once. ``EVAL`` is never sent (a least-privilege ACL,
  deploy/users.acl, allows ``evalsha`` and ``script|load`` only);
- every call of a trip goes on one connection, in order, in one non-transactional
  pipeline, then ``WAIT`` when asked (WAIT counts the writes of its own connection);
- a lone call without WAIT is one plain command, no pipeline (``call`` / ``acall``:
  the hot path of every claim, ack and add), its error reply raised or returned as the
  trip says;
- a connection error raises; redis-py may resend the whole pipeline first
  (``urls.resend_policy``): every script sent must be safe to resend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

COMMAND = "EVALSHA"  # what runs a cached script: sent from this module only


class Sendable(Protocol):
    """A script the gateway can send: its SHA1 and its source (a redis-py ``Script``
    registered by ``scripts.register``, or a ``Lua``)."""

    @property
    def sha(self) -> str: ...

    @property
    def script(self) -> str | bytes: ...


class Lua:
    """A Lua text that is not a lua/ file (e.g. upkeep.START_COUNT), or a lua/ script for
    a client without redis-py ``Script`` objects; ``sha`` is its SHA1, computed once."""

    __slots__ = ("script", "sha")

    def __init__(self, script: str) -> None:
        self.script = script
        self.sha = hashlib.sha1(script.encode()).hexdigest()


Call = tuple[Sendable, Sequence[Any]]  # (script, ARGV)


@dataclass(frozen=True, slots=True)
class Wait:
    """``WAIT replicas timeout_ms`` after a trip's calls; ``check`` judges its answer
    (``replication.Waiter.check``; it may raise), before any error reply is raised."""

    replicas: int
    timeout_ms: int
    check: Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class Trip:
    """One round trip: ``calls`` in order with ``route`` as every call's KEYS (what
    routes them in Redis Cluster), then ``wait``. ``raises``: the first error reply is
    raised (after WAIT's check); else each comes back as its exception, in its place."""

    calls: Sequence[Call]
    route: Sequence[str] = ()
    wait: Wait | None = None
    raises: bool = True


@cache
def _no_script() -> type[Exception]:
    import redis  # the optional dependency, loaded with the first NOSCRIPT only

    error: type[Exception] = redis.exceptions.NoScriptError
    return error


@cache
def _error_reply() -> type[Exception]:
    import redis

    error: type[Exception] = redis.exceptions.ResponseError
    return error


def commands(trip: Trip, todo: Sequence[int]) -> list[tuple[Any, ...]]:
    """The commands that send the calls ``todo`` (indexes into ``trip.calls``), in order,
    then WAIT if the trip has one."""
    route = trip.route
    out: list[tuple[Any, ...]] = []
    for i in todo:
        script, argv = trip.calls[i]
        out.append((COMMAND, script.sha, len(route), *route, *argv))
    if trip.wait is not None:  # WAIT covers every write sent before it on this connection
        out.append(("WAIT", trip.wait.replicas, trip.wait.timeout_ms))
    return out


def read(
    trip: Trip, todo: Sequence[int], out: Sequence[Any], replies: list[Any], *, retry: bool
) -> tuple[list[int], Any]:
    """Put the replies ``out`` to ``commands(trip, todo)`` in their places in ``replies``;
    the calls to send again (those answered NOSCRIPT: nothing ran; none unless ``retry``)
    and WAIT's answer (None without WAIT)."""
    out = list(out)
    acked = out.pop() if trip.wait is not None else None
    no_script = _no_script()
    again = []
    for i, reply in zip(todo, out, strict=True):
        replies[i] = reply
        if retry and isinstance(reply, no_script):
            again.append(i)
    return again, acked


def to_load(trip: Trip, todo: Sequence[int]) -> list[Sendable]:
    """The distinct scripts of the calls ``todo``: what to load before sending them."""
    return list({id(trip.calls[i][0]): trip.calls[i][0] for i in todo}.values())


def settle(trip: Trip, replies: list[Any], acked: Any) -> list[Any]:
    """The trip's answer: WAIT's answer checked first (``Wait.check``), then, if the trip
    ``raises``, its first error reply raised; else ``replies``, errors in place."""
    if trip.wait is not None:
        trip.wait.check(acked)
    if trip.raises:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


# ---- the executors: they only send -----------------------------------------------------


def call(client: Any, script: Sendable, route: Sequence[str], argv: Sequence[Any]) -> Any:
    """One call, no WAIT, on a sync client: one plain command (a second, after a SCRIPT
    LOAD, if it met NOSCRIPT); its reply, an error reply raised."""
    try:
        return client.execute_command(COMMAND, script.sha, len(route), *route, *argv)
    except _no_script():  # evaluated only when something was raised
        client.script_load(script.script)
        return client.execute_command(COMMAND, script.sha, len(route), *route, *argv)


def run(client: Any, trip: Trip) -> list[Any]:
    """Send ``trip`` on a sync client (redis-py, cluster or not); its replies, as
    ``settle`` answers them."""
    if trip.wait is None and len(trip.calls) == 1:
        script, argv = trip.calls[0]
        try:
            return [call(client, script, trip.route, argv)]
        except _error_reply() as exc:  # evaluated only when something was raised
            if trip.raises:
                raise
            return [exc]
    replies: list[Any] = [None] * len(trip.calls)
    todo: Sequence[int] = range(len(trip.calls))
    acked: Any = None
    retry = True
    while todo:
        with client.pipeline(transaction=False) as pipe:
            for command in commands(trip, todo):
                pipe.execute_command(*command)
            out = pipe.execute(raise_on_error=False)
        todo, acked = read(trip, todo, out, replies, retry=retry)
        retry = False
        for script in to_load(trip, todo):
            client.script_load(script.script)
    return settle(trip, replies, acked)


async def acall(client: Any, script: Sendable, route: Sequence[str], argv: Sequence[Any]) -> Any:
    """``call`` on a ``redis.asyncio`` client."""
    try:
        return await client.execute_command(COMMAND, script.sha, len(route), *route, *argv)
    except _no_script():
        await client.script_load(script.script)
        return await client.execute_command(COMMAND, script.sha, len(route), *route, *argv)


async def arun(client: Any, trip: Trip) -> list[Any]:
    """``run`` on a ``redis.asyncio`` client."""
    if trip.wait is None and len(trip.calls) == 1:
        script, argv = trip.calls[0]
        try:
            return [await acall(client, script, trip.route, argv)]
        except _error_reply() as exc:
            if trip.raises:
                raise
            return [exc]
    replies: list[Any] = [None] * len(trip.calls)
    todo: Sequence[int] = range(len(trip.calls))
    acked: Any = None
    retry = True
    while todo:
        async with client.pipeline(transaction=False) as pipe:
            for command in commands(trip, todo):
                pipe.execute_command(*command)
            out = await pipe.execute(raise_on_error=False)
        todo, acked = read(trip, todo, out, replies, retry=retry)
        retry = False
        for script in to_load(trip, todo):
            await client.script_load(script.script)
    return settle(trip, replies, acked)
