"""The one place a Lua script is sent to Redis: every script call of the sync store
(``RedisStore``, the shards of a ``ShardedStore``) and of the async one (``AsyncStore``)
goes through here, and no other module names the commands that run a script.

A round trip is described without I/O (``Trip``: the ``(script, argv)`` calls, their
routing keys, an optional ``WAIT``, whether an error reply raises), and its replies are
read without I/O (``read``, ``settle``); two small executors, ``run`` (sync) and ``arun``
(``redis.asyncio``), only send the commands. The rules, the same for both:

- a lua/ script is sent as its Redis Functions library's function (``FCALL``, Redis 7
  and later: the units' functions are built once, when the library is loaded, not on
  every call; protocol/scripts.py), any other Lua text, or every script on a client whose
  server cannot (Redis 6, or an ACL without ``fcall``), by its SHA1 (``EVALSHA``). Neither
  is asked about first: a call answered "not found" (NOSCRIPT, ``Function not found``)
  did not run: its library or script is loaded (``FUNCTION LOAD`` / ``SCRIPT LOAD``:
  every primary of a cluster) and that call alone is sent again; a call refused
  ``FCALL`` itself (unknown command, no permission) did not run either: that client
  sends scripts from then on (``send_scripts``), that call again; so does one whose
  library a full Redis refuses to load, for a while (``FULL_S``). ``EVAL`` is never
  sent (deploy/users.acl allows ``fcall``, ``function|load``, ``evalsha`` and
  ``script|load`` only);
- every call of a trip goes on one connection, in order, in one non-transactional
  pipeline, then ``WAIT`` when asked (WAIT counts the writes of its own connection);
- a lone call without WAIT is one plain command, no pipeline (``call`` / ``acall``:
  the hot path of every claim, ack and add), its error reply raised or returned as the
  trip says;
- keys and arguments that are text go as UTF-8 bytes, encoded here once (``command``);
- a connection error raises; redis-py may resend the whole pipeline first
  (``urls.resend_policy``): every script sent must be safe to resend.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

COMMAND = "EVALSHA"  # what runs a cached script: sent from this module only
FUNCTION = "FCALL"  # what runs a library's function (Redis 7+): sent from this module only
# on a redis-py client: until when (time.monotonic()) it sends scripts, not FCALL (send_scripts)
SCRIPTS_ONLY = "_duetime_scripts_until"
FULL_S = 10.0  # scripts sent this long after a full Redis refused to load a library
ATTEMPTS = 3  # sends of one call at most: FCALL refused, then NOSCRIPT, then it runs


class Sendable(Protocol):
    """A script the gateway can send: its source and SHA1, and, for a lua/ script, its
    library's function name and code (``scripts.sendable``)."""

    @property
    def sha(self) -> str: ...

    @property
    def script(self) -> str | bytes: ...

    @property
    def function(self) -> str | None: ...

    @property
    def library(self) -> str | None: ...


class Lua:
    """A Lua text: ``sha`` is its SHA1, computed once; a lua/ script also has its Redis
    Functions library (``function``, ``library``: protocol/scripts.py), other texts (e.g.
    upkeep.START_COUNT) none."""

    __slots__ = ("script", "sha", "function", "library")

    def __init__(self, script: str, function: str | None = None, library: str | None = None):
        self.script = script
        self.sha = hashlib.sha1(script.encode()).hexdigest()
        self.function, self.library = function, library


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
    import redis  # the optional dependency, loaded with the first reply read

    error: type[Exception] = redis.exceptions.NoScriptError
    return error


@cache
def _error_reply() -> type[Exception]:
    import redis

    error: type[Exception] = redis.exceptions.ResponseError
    return error


def send_scripts(client: Any, seconds: float = math.inf) -> None:
    """Make ``client`` send scripts (EVALSHA), not FCALL, for ``seconds`` (for good: a
    server that refused FCALL itself)."""
    setattr(client, SCRIPTS_ONLY, time.monotonic() + seconds)


def command(
    client: Any, script: Sendable, route: Sequence[str], argv: Sequence[Any]
) -> tuple[Any, ...]:
    """The command that runs ``script`` on ``client``: FCALL of its function, or EVALSHA.
    Its text arguments (keys and ARGV) go as UTF-8 bytes, encoded here: redis-py passes
    bytes through, and its own encoding costs ~4x a ``str.encode`` per argument (an
    enqueue sends 17: docs/performance.md, *Producer cost*)."""
    fn = script.function
    until = getattr(client, SCRIPTS_ONLY, 0.0)
    args = [a.encode() if type(a) is str else a for a in (*route, *argv)]
    if fn is not None and (until == 0.0 or until < time.monotonic()):
        return (FUNCTION, fn, len(route), *args)
    return (COMMAND, script.sha, len(route), *args)


def commands(client: Any, trip: Trip, todo: Sequence[int]) -> list[tuple[Any, ...]]:
    """The commands that send the calls ``todo`` (indexes into ``trip.calls``) on
    ``client``, in order, then WAIT if the trip has one."""
    route = trip.route
    out = [command(client, trip.calls[i][0], route, trip.calls[i][1]) for i in todo]
    if trip.wait is not None:  # WAIT covers every write sent before it on this connection
        out.append(("WAIT", trip.wait.replicas, trip.wait.timeout_ms))
    return out


def lacks(reply: Any) -> str | None:
    """What an error reply says the server lacked, the call not run: ``"script"``
    (NOSCRIPT), ``"function"`` (its library is not loaded), ``"fcall"`` (FCALL itself:
    an older server, or an ACL without it); None for any other reply."""
    if not isinstance(reply, _error_reply()):
        return None
    if isinstance(reply, _no_script()):
        return "script"
    text = str(reply)
    if text.startswith("Function not found"):
        return "function"
    low = text.lower()  # (quoted 'fcall' by Redis 7, `fcall` by older servers)
    if "fcall" in low and ("unknown command" in low or "permission" in low):
        return "fcall"
    return None


def read(
    trip: Trip, todo: Sequence[int], out: Sequence[Any], replies: list[Any], *, retry: bool
) -> tuple[list[int], Any]:
    """Put the replies ``out`` to ``commands(trip, todo)`` in their places in ``replies``;
    the calls to send again (those the server answered it lacked what they name: nothing
    ran; none unless ``retry``) and WAIT's answer (None without WAIT)."""
    out = list(out)
    acked = out.pop() if trip.wait is not None else None
    again = []
    for i, reply in zip(todo, out, strict=True):
        replies[i] = reply
        if retry and lacks(reply) is not None:
            again.append(i)
    return again, acked


def to_load(trip: Trip, todo: Sequence[int], replies: Sequence[Any]) -> list[tuple[Sendable, str]]:
    """The distinct scripts of the calls ``todo`` and what each lacked (``lacks``, of its
    first such reply): what to load, or to send otherwise, before sending them again."""
    out: dict[int, tuple[Sendable, str]] = {}
    for i in todo:
        script = trip.calls[i][0]
        kind = lacks(replies[i])
        if kind is not None and id(script) not in out:
            out[id(script)] = (script, kind)
    return list(out.values())


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


def _load_failed(client: Any, exc: Exception) -> None:
    """FUNCTION LOAD refused: "already exists" (another client loaded it: sent again as it
    is); for want of Redis Functions (an older server, an ACL without ``function|load``)
    the client sends scripts from then on; a full Redis (``noeviction``: FUNCTION LOAD is a
    write, SCRIPT LOAD is not) for ``FULL_S``. Any other error is raised."""
    text = str(exc)
    low = text.lower()
    if "already exists" in low:
        return
    if "unknown" in low or "permission" in low:
        send_scripts(client)
    elif text.startswith("OOM") or "used memory" in low:
        send_scripts(client, FULL_S)
    else:
        raise exc


def ready(client: Any, script: Sendable, kind: str) -> None:
    """Make ``client`` able to send ``script`` again after its server lacked ``kind``
    (``lacks``): the library or the script loaded, or the client sent to scripts."""
    if kind == "function" and script.library is not None:
        try:
            client.function_load(script.library)
        except _error_reply() as exc:
            _load_failed(client, exc)
    elif kind == "fcall":
        send_scripts(client)
    else:
        client.script_load(script.script)


async def aready(client: Any, script: Sendable, kind: str) -> None:
    """``ready`` on a ``redis.asyncio`` client."""
    if kind == "function" and script.library is not None:
        try:
            await client.function_load(script.library)
        except _error_reply() as exc:
            _load_failed(client, exc)
    elif kind == "fcall":
        send_scripts(client)
    else:
        await client.script_load(script.script)


def call(client: Any, script: Sendable, route: Sequence[str], argv: Sequence[Any]) -> Any:
    """One call, no WAIT, on a sync client: one plain command (sent again after ``ready``
    if the server lacked what it names); its reply, an error reply raised."""
    for attempt in range(ATTEMPTS):
        try:
            return client.execute_command(*command(client, script, route, argv))
        except _error_reply() as exc:  # evaluated only when something was raised
            kind = lacks(exc)
            if kind is None or attempt == ATTEMPTS - 1:
                raise
            ready(client, script, kind)
    raise AssertionError("unreachable")


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
    for attempt in range(ATTEMPTS):
        with client.pipeline(transaction=False) as pipe:
            for c in commands(client, trip, todo):
                pipe.execute_command(*c)
            out = pipe.execute(raise_on_error=False)
        todo, acked = read(trip, todo, out, replies, retry=attempt < ATTEMPTS - 1)
        if not todo:
            break
        for script, kind in to_load(trip, todo, replies):
            ready(client, script, kind)
    return settle(trip, replies, acked)


async def acall(client: Any, script: Sendable, route: Sequence[str], argv: Sequence[Any]) -> Any:
    """``call`` on a ``redis.asyncio`` client."""
    for attempt in range(ATTEMPTS):
        try:
            return await client.execute_command(*command(client, script, route, argv))
        except _error_reply() as exc:
            kind = lacks(exc)
            if kind is None or attempt == ATTEMPTS - 1:
                raise
            await aready(client, script, kind)
    raise AssertionError("unreachable")


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
    for attempt in range(ATTEMPTS):
        async with client.pipeline(transaction=False) as pipe:
            for c in commands(client, trip, todo):
                pipe.execute_command(*c)
            out = await pipe.execute(raise_on_error=False)
        todo, acked = read(trip, todo, out, replies, retry=attempt < ATTEMPTS - 1)
        if not todo:
            break
        for script, kind in to_load(trip, todo, replies):
            await aready(client, script, kind)
    return settle(trip, replies, acked)
