"""What a Redis server must offer before duetime runs on it (``RedisStore.check_server``),
and what a namespace's own keys must be: the types the scripts expect (a script that finds
one otherwise answers ``ERR duetime corrupt <key> ...`` and writes nothing)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from scheduler.errors import (
    KeyRulesChangedError,
    LayoutRefusedError,
    StoreConfigError,
    StoreCorruptError,
    StoreFullError,
    StoreUnavailableError,
    WrongServerError,
)
from scheduler.stores.redis.protocol import gateway
from scheduler.stores.redis.protocol.keys import Keys

MIN_REDIS = (7, 0)


def check_info(info: Mapping[str, Any], url: str) -> list[str]:
    """Raise ``StoreConfigError`` (saying how to fix it) for a server older than 7.0 or
    one that may evict keys; return warnings for what weakens the contract (AOF off)."""
    version = tuple(int(x) for x in str(info.get("redis_version", "0")).split(".")[:2])
    if version < MIN_REDIS:
        raise StoreConfigError(
            f"Redis {info.get('redis_version')} at {url} is too old: duetime needs "
            f"{MIN_REDIS[0]}.{MIN_REDIS[1]} or newer (script shebangs, TIME in scripts)"
        )
    refused = evicting(info, url)
    if refused is not None:
        raise refused
    if not info.get("aof_enabled"):
        return [
            f"Redis at {url} has AOF off: a restart loses recent jobs and claims; set "
            "'appendonly yes' (and 'appendfsync always' for the strict contract)"
        ]
    return []


def node_infos(reply: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """An ``INFO`` reply as one mapping per server: a cluster client asks every node and
    answers ``{node: info}``; a plain client answers the one server's mapping."""
    values = list(reply.values())
    if values and all(isinstance(v, Mapping) for v in values):
        return values
    return [reply]


def evicting(info: Mapping[str, Any], url: str) -> StoreConfigError | None:
    """The refusal of a server (any node of a cluster) whose ``maxmemory-policy`` may
    evict keys, saying how to fix it; None under ``noeviction``. Replicas raise it at
    start, producers before they enqueue (``EvictionCheck``): one message for both."""
    for node in node_infos(info):
        policy = node.get("maxmemory_policy", "noeviction")
        if policy != "noeviction":
            return StoreConfigError(
                f"Redis at {url} has maxmemory-policy {policy!r}: under memory pressure it "
                "evicts keys, leases (duplicate runs) and jobs (lost runs) among them. Set "
                "'maxmemory-policy noeviction' in redis.conf (or CONFIG SET "
                "maxmemory-policy noeviction)"
            )
    return None


def evicted_keys(info: Mapping[str, Any]) -> int:
    """``evicted_keys`` of ``INFO stats``, summed over a cluster's nodes."""
    return sum(int(node.get("evicted_keys", 0) or 0) for node in node_infos(info))


def policies(info: Mapping[str, Any]) -> str:
    """The ``maxmemory-policy`` of the server (of each node, if they differ)."""
    found = sorted({str(n.get("maxmemory_policy", "noeviction")) for n in node_infos(info)})
    return ", ".join(found)


def eviction_state(client: Any) -> tuple[str, int] | None:
    """The server's ``maxmemory-policy`` (each node's, if they differ) and its
    ``evicted_keys`` since it started (``duetime doctor``); None if ``INFO`` is refused."""
    import redis

    try:
        info = client.info("memory", "stats")
    except redis.ResponseError:
        return None
    return policies(info), evicted_keys(info)


PRODUCER_CHECK_S = 60.0  # seconds a producer's check of the eviction policy is trusted


class EvictionCheck:
    """A producer's cached check of the eviction policy (``INFO memory``, which a
    least-privilege user with ``+info`` may run; ``CONFIG GET`` is often denied): asked
    before the first write, then again when the last good answer is ``PRODUCER_CHECK_S``
    old, so an enqueue costs no extra round trip in between. A refusal is not cached (the
    next write asks again, and sees a fix at once). A server that refuses ``INFO`` (an ACL
    without ``+info``, a proxy or a fake that lacks it) is logged once (a warning) and not
    asked again for the period: the write goes on."""

    def __init__(self, period: float = PRODUCER_CHECK_S) -> None:
        self.period = period
        self._good_until = 0.0
        self._warned = False

    def due(self) -> bool:
        """True when the policy must be asked again (a clock read: the hot path)."""
        return time.monotonic() >= self._good_until

    def judge(self, info: Mapping[str, Any] | Exception, url: str) -> None:
        """Take ``INFO memory``'s answer (or the error it raised): raise the refusal under
        an evicting policy; else trust it for the period."""
        if isinstance(info, Exception):
            text = str(info)
            if not any(t in text for t in ("NOPERM", "no permissions", "unknown command")):
                raise handshake_refused(info, url) or info  # a wrong URL says what is wrong
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot check the eviction policy of Redis at %s (INFO refused: %s): "
                    "grant this user +info, or an evicting policy may lose jobs unnoticed",
                    url,
                    info,
                )
        else:
            refused = evicting(info, url)
            if refused is not None:
                raise refused
        self._good_until = time.monotonic() + self.period

    def check(self, client: Any, url: str) -> None:
        """The sync producer's check (``RedisStore.add``/``add_many``)."""
        if not self.due():
            return
        import redis

        try:
            info: Mapping[str, Any] | Exception = client.info("memory")
        except redis.ResponseError as exc:
            info = exc
        self.judge(info, url)


log = logging.getLogger("duetime.redis")
LOG_EVERY = 60.0  # seconds between two log lines about the same corrupt key
_logged: dict[str, float] = {}
_logged_lock = threading.Lock()
_CORRUPT = re.compile(r"duetime corrupt (\S+) (.*)$", re.DOTALL)


def corrupt_error(reply: str, url: str) -> StoreCorruptError:
    """The ``StoreCorruptError`` for a script's ``ERR duetime corrupt <key> ...`` reply."""
    m = _CORRUPT.search(reply)
    key, what = (m.group(1), m.group(2)) if m else ("?", reply)
    return StoreCorruptError(
        f"Redis at {url}: {key} {what}. duetime writes nothing to this namespace while "
        f"it is so (it cannot be moved aside like one job). Inspect it (redis-cli TYPE "
        f"{key}), then rename it out of the way (RENAME {key} {key}.corrupt) or delete it; "
        "the data it held is then rebuilt or reported by `duetime doctor`",
        key,
    )


def log_rate_limited(logger: logging.Logger, exc: StoreCorruptError) -> StoreCorruptError:
    """Log ``exc`` unless a line about the same key was logged in the last minute (per
    process); marks it ``logged`` so that generic handlers stay quiet. Returns it."""
    now = time.monotonic()
    with _logged_lock:
        last = _logged.get(exc.key)
        fresh = last is None or now - last >= LOG_EVERY
        if fresh:
            _logged[exc.key] = now
    if fresh:
        logger.error("%s", exc)
    exc.logged = True
    return exc


def check_keys(client: Any, keys: Keys, url: str) -> None:
    """Raise ``StoreCorruptError`` for the first namespace-wide key of ``keys`` that holds
    the wrong type, or a counter or stats field that is not an integer (a replica refuses
    to start on it rather than fail on every claim)."""
    shapes = {
        keys.lanes: "set",
        keys.lease: "zset",
        keys.running: "hash",
        keys.events: "stream",
        keys.stats: "hash",
        keys.quarantined: "hash",
        keys.quarantine: "list",
        keys.reconcile: "string",
        keys.epoch: "string",
        keys.layout: "string",
        keys.shards: "string",
        keys.tasks: "hash",
        keys.parked: "set",
    }
    counters = [keys.fence, keys.seq, keys.gen, keys.ids]
    for key in counters:
        shapes[key] = "string"
    if _text(client.type(keys.lanes)) == "set":
        for lane in sorted(_text(x) for x in client.smembers(keys.lanes)):
            shapes[keys.due(lane)] = "zset"
    with client.pipeline(transaction=False) as p:
        for key in shapes:
            p.type(key)
        found = [_text(t) for t in p.execute()]
    for (key, want), got in zip(shapes.items(), found, strict=True):
        if got not in ("none", want):
            raise corrupt_error(f"duetime corrupt {key} is a {got}, expected {want}", url)
    for key in counters:
        value = client.get(key)
        if value is not None and not _INTEGER.match(_text(value)):
            raise corrupt_error(f"duetime corrupt {key} is not an integer, expected one", url)
    for field, value in client.hgetall(keys.stats).items():
        if not _INTEGER.match(_text(value)):
            raise corrupt_error(
                f"duetime corrupt {keys.stats} field {_text(field)} is not an integer, "
                "expected an integer",
                url,
            )


_INTEGER = re.compile(r"^-?\d{1,18}$")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def full_message(url: str, done: str = "nothing was written") -> str:
    """``StoreFullError``'s one line (Redis's own text stays in the exception's cause);
    ``done``: what the refused call left written."""
    return (
        f"Redis at {url} is out of memory (maxmemory reached, policy noeviction): {done}; "
        "replicas still run what is stored. Raise maxmemory, or cancel or delete jobs that "
        "are not needed, then retry"
    )


def not_interrupted(exc: StoreFullError, job_id: str) -> StoreFullError:
    """A cancel that Redis, out of memory, let through (cancel.lua may) but whose request
    to stop the running invocations (a plain HSET) it refused."""
    done = f"job {job_id!r} was cancelled, but its running invocations were not asked to stop"
    return StoreFullError(full_message(exc.url, done), exc.url)


def _unreachable_errors() -> tuple[type[Exception], ...]:
    try:
        import redis
    except ImportError:  # the "redis" extra is not installed: no store can be made
        return ()
    return (
        redis.exceptions.OutOfMemoryError,
        redis.ConnectionError,
        redis.TimeoutError,
        redis.exceptions.InvalidResponse,  # something that is not Redis answers there
    )


UNREACHABLE = _unreachable_errors()  # what ``unreachable`` turns into our errors


def unreachable(exc: Exception, url: str) -> Exception:
    """A redis-py connection, timeout or out-of-memory error as the error that says what
    to check (the URL is shown without its password)."""
    import redis

    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return StoreFullError(full_message(url), url)
    from redis.asyncio.sentinel import MasterNotFoundError as AsyncMasterNotFound
    from redis.sentinel import MasterNotFoundError

    if isinstance(exc, MasterNotFoundError | AsyncMasterNotFound):
        from scheduler.stores.redis.protocol import urls

        # redis-py >= 8.2 reports a sentinel's refusal (a server, not a sentinel) in here
        return handshake_refused(exc, url) or StoreUnavailableError(urls.no_primary(str(exc), url))
    if isinstance(exc, redis.exceptions.AuthenticationError):  # a ConnectionError subclass
        return StoreUnavailableError(
            f"Redis at {url} refused the credentials ({exc}): check the user:password of "
            "the URL (redis://USER:PASSWORD@host:port)"
        )
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return StoreUnavailableError(
            f"what answers at {url} is not Redis ({exc}): is the host and port right?"
        )
    return StoreUnavailableError(
        f"cannot reach Redis at {url}: {exc}; "
        + (tls_refused(str(exc)) or "is it running, and is the URL right?")
    )


# what OpenSSL says when Python >= 3.13's default ssl.VERIFY_X509_STRICT refuses a chain
_STRICT = ("key usage", "authority key identifier", "not marked critical")


def tls_refused(text: str) -> str | None:
    """What to do when this client refused the server's TLS certificate (None: ``text``
    is about something else)."""
    if "CERTIFICATE_VERIFY_FAILED" not in text:
        return None
    hint = (
        "the server's TLS certificate was refused: is the CA that signed it given in the "
        "URL (?ssl_ca_certs=/path/to/ca.pem)?"
    )
    if any(s in text.lower() for s in _STRICT):
        hint += (
            "; Python 3.13 and later also refuse a CA without the keyUsage extension, or a "
            "server certificate without an authority key identifier (ssl.VERIFY_X509_STRICT): "
            "reissue them with those extensions"
        )
    return hint


#: The data layouts this version's scripts read (lua/include/core.lua, LAYOUT ... LAYOUT_PACKED);
#: a namespace's ``layout`` key records the newest that wrote it.
LAYOUTS = ("1", "2", "3", "4")


def layout_refused(layout: str | bytes | None) -> LayoutRefusedError | None:
    """The refusal of a namespace of a layout this version does not read (a newer one's),
    as the scripts word it; None if it reads it (or nothing was written yet)."""
    if isinstance(layout, bytes):  # a client that does not decode its replies
        layout = layout.decode("utf-8", "replace")
    if layout is None or layout in LAYOUTS:
        return None
    return LayoutRefusedError(
        f"layout {layout[:20]} in this namespace, but this duetime reads layouts 1 to "
        f"{LAYOUTS[-1]}: run one version of duetime per namespace"
    )


def refused(exc: Exception, url: str) -> Exception:
    """A script's error reply as what it means: bad input refused by the script is a
    ValueError; an add sent with a stale stamp of the key rules, ``KeyRulesChangedError``;
    a namespace key of the wrong type, ``StoreCorruptError`` (logged at most once a minute
    per key); the layout of another version, ``StoreConfigError``."""
    if "duetime bad-input" in str(exc):
        return ValueError(f"the store refused the request: {exc}")
    if "duetime stale-rules" in str(exc):  # adds.py reloads the key rules and resends once
        return KeyRulesChangedError(f"Redis at {url}: {exc}")
    if str(exc).startswith("duetime layout "):  # (a corrupt key's name may hold the words)
        return LayoutRefusedError(str(exc).removeprefix("duetime "))
    if "duetime corrupt" in str(exc):
        return log_rate_limited(log, corrupt_error(str(exc), url))
    return handshake_refused(exc, url) or exc


def handshake_refused(exc: BaseException, url: str) -> Exception | None:
    """A server's refusal of the connection's own set-up (not of a command) as the error
    that says what is wrong with the URL; None for any other error."""
    text = str(exc)
    if text.startswith("DB index is out of range"):
        return WrongServerError(
            f"Redis at {url} has no such database ({text}): the URL's /N must be below the "
            "server's 'databases' setting (16 unless configured)"
        )
    if "unknown command 'SENTINEL'" in text:
        return WrongServerError(
            f"{url} names a Redis server, not a sentinel (it does not know SENTINEL): "
            "use redis://host:port for that server, or give the sentinels' addresses "
            "(port 26379 by default)"
        )
    told = _UNKNOWN_TO_SENTINEL.search(text)
    if told:
        return WrongServerError(
            f"{url} names a Redis Sentinel, not a Redis server (it does not know "
            f"{told.group(1).upper()}): use a redis+sentinel://HOST:PORT/SERVICE URL, "
            "which asks the sentinels for the service's primary"
        )
    return None


# Data commands every Redis server knows (never renamed in practice) that a sentinel,
# which answers PING and INFO, refuses: told for the one a command or a handshake met
# (the gateway's command that runs a script, gateway.COMMAND, among them)
_UNKNOWN_TO_SENTINEL = re.compile(
    r"unknown command '(get|select|time|type|exists|hgetall|hmget|smembers|zrange|"
    rf"zscore|lrange|xrevrange|scan|{gateway.COMMAND.lower()}|{gateway.FUNCTION.lower()}|script)'",
    re.IGNORECASE,
)
