"""Redis URLs: a plain server (``redis://``, ``rediss://``, ``unix://``: redis-py's own
parser), a Redis Cluster given by seed nodes, or a primary found through Redis Sentinel:

    redis+cluster://[user:password@]host1[:6379][,host2[:6379]...][/][?shards=N]

    redis+sentinel://[user:password@]host1[:26379][,host2[:26379]...]/service[/db]
                     [?sentinel_password=...&sentinel_username=...]

``user:password`` authenticate to the data servers (primary and replicas); sentinels that
need a password of their own take ``sentinel_password`` (and ``sentinel_username``). The
service name (the ``sentinel monitor <name>`` of sentinel.conf) is required; ``db`` defaults
to 0, a sentinel's port to 26379. IPv6 hosts go in brackets: ``[::1]:26379``.

A cluster URL connects through redis-py's ``RedisCluster``: it learns the slot map
from any seed that answers and follows ``MOVED``/``ASK`` redirections by itself. Any URL
may carry ``shards=N`` in its query (``split_shards``): the namespace's shard count
(stores/redis/sharding/sharded.py), taken off before the URL reaches redis-py.

A Sentinel URL connects through redis-py's ``Sentinel.master_for``: every new connection
asks the sentinels for the current primary, and a connection to a demoted primary is
dropped, so after a failover the client follows the new primary by itself. duetime adds
no failover logic of its own.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username")
# How long one sentinel may take to answer "who is the primary?" before the next is asked.
SENTINEL_TIMEOUT = 1.0
FORMAT = "redis+sentinel://[user:password@]host1:26379,host2:26379/service_name[/db]"
CLUSTER_SCHEME = "redis+cluster"
CLUSTER_PORT = 6379
CLUSTER_FORMAT = "redis+cluster://[user:password@]host1:7000[,host2:7001...][/?shards=N]"


class RedisURLError(ValueError):
    """A Redis URL that cannot be used; the message says what is wrong and the format."""


@dataclass(frozen=True)
class SentinelURL:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


@dataclass(frozen=True)
class ClusterURL:
    """A parsed ``redis+cluster://`` URL (its ``shards`` option is ``split_shards``')."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None


def is_cluster(url: str) -> bool:
    """True for a ``redis+cluster://`` URL."""
    return url.lower().startswith(CLUSTER_SCHEME + "://")


def is_cluster_client(client: Any) -> bool:
    """True when ``client`` is redis-py's ``RedisCluster``, sync or asyncio (scripts must
    name a key to be routed; pipelines take no Script objects)."""
    from redis.asyncio.cluster import RedisCluster as AsyncCluster
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster | AsyncCluster)


def split_shards(url: str) -> tuple[str, int | None]:
    """``url`` without its ``shards=N`` query option, and N (None if absent). Raises
    ``RedisURLError`` for a count that is not an integer from 1 to 1024."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    items = [item.partition("=") for item in parts.query.split("&") if item]
    found = [v for k, _, v in items if k == "shards"]
    if not found:
        return url, None
    value = found[-1]
    if not value.isdigit() or not 1 <= int(value) <= MAX_SHARDS:
        raise RedisURLError(
            f"bad shards={value!r} in {safe(url)!r}: the shard count must be "
            f"an integer from 1 to {MAX_SHARDS}"
        )
    query = "&".join(f"{k}{sep}{v}" for k, sep, v in items if k != "shards")
    return urlunsplit(parts._replace(query=query)), int(value)


MAX_SHARDS = 1024


def shard_count(url: str, given: int | None, env: str | None) -> tuple[str, int | None]:
    """``url`` without ``shards=N``, and the namespace's shard count: ``given`` (an option;
    it must agree with the URL's), else $DUETIME_SHARDS (``env``), else the URL's. Raises
    ValueError (``RedisURLError``) for a count that is not 1 to 1024, or two that differ."""
    base, in_url = split_shards(url)
    if given is not None:
        if in_url is not None and in_url != given:
            raise ValueError(f"two shard counts: --shards {given} and the URL's shards={in_url}")
        return base, given
    if env:
        if not env.isdigit() or not 1 <= int(env) <= MAX_SHARDS:
            raise RedisURLError(
                f"DUETIME_SHARDS={env!r}: the shard count must be an integer from 1 to {MAX_SHARDS}"
            )
        return base, int(env)
    return base, in_url


def read_timeout(client: Any) -> float:
    """How long ``client``'s connections wait for a reply, s (``socket_timeout``; inf: no limit)."""
    pool = getattr(client, "connection_pool", None) or getattr(client, "nodes_manager", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    timeout = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else math.inf


def parse_cluster(url: str) -> ClusterURL:
    """Parse a ``redis+cluster://`` URL, or raise ``RedisURLError`` saying what to fix."""

    def bad(why: str) -> RedisURLError:
        return RedisURLError(f"bad cluster URL {safe(url)!r}: {why}; expected {CLUSTER_FORMAT}")

    url, _ = split_shards(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise bad(f"malformed IPv6 host ({exc})") from None
    if parts.scheme.lower() != CLUSTER_SCHEME:
        raise bad(f"the scheme must be {CLUSTER_SCHEME}://")
    username, password, hosts = _userinfo(parts.netloc)
    nodes = tuple(_host_port(h, bad, CLUSTER_PORT) for h in hosts.split(","))
    if parts.path.strip("/"):
        raise bad(f"a cluster has no database number or path ({parts.path!r})")
    if parts.query:
        raise bad(f"unknown option(s) {parts.query!r} (known: shards)")
    if parts.fragment:
        raise bad("a '#fragment' is not allowed")
    return ClusterURL(nodes=nodes, username=username, password=password)


def _userinfo(netloc: str) -> tuple[str | None, str | None, str]:
    """``user:password@hosts`` -> (username, password, hosts), percent-decoded."""
    userinfo, _, hosts = netloc.rpartition("@")
    if not userinfo:
        return None, None, hosts
    user, sep, pw = userinfo.partition(":")
    return unquote(user) or None, unquote(pw) if sep else None, hosts


def is_sentinel(url: str) -> bool:
    """True for a ``redis+sentinel://`` URL."""
    return url.lower().startswith(SENTINEL_SCHEME + "://")


def parse_sentinel(url: str) -> SentinelURL:
    """Parse a ``redis+sentinel://`` URL, or raise ``RedisURLError`` saying what to fix."""

    def bad(why: str) -> RedisURLError:
        return RedisURLError(f"bad Sentinel URL {safe(url)!r}: {why}; expected {FORMAT}")

    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL"
        raise bad(f"malformed IPv6 host ({exc})") from None
    if parts.scheme.lower() != SENTINEL_SCHEME:
        raise bad(f"the scheme must be {SENTINEL_SCHEME}://")
    username, password, hosts = _userinfo(parts.netloc)
    sentinels = tuple(_host_port(h, bad) for h in hosts.split(","))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise bad("the service name is missing (the name in 'sentinel monitor <name>')")
    if len(path) > 2:
        raise bad(f"too many path parts {parts.path!r}")
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise bad(f"the database must be a number, not {path[1]!r}")
        db = int(path[1])
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(query) - set(SENTINEL_OPTIONS))
    if unknown:
        raise bad(f"unknown option(s) {', '.join(unknown)} (known: {', '.join(SENTINEL_OPTIONS)})")
    if parts.fragment:
        raise bad("a '#fragment' is not allowed")
    return SentinelURL(
        sentinels=sentinels,
        service=unquote(path[0]),
        db=db,
        username=username,
        password=password,
        sentinel_username=query.get("sentinel_username", [None])[-1],
        sentinel_password=query.get("sentinel_password", [None])[-1],
    )


def _host_port(text: str, bad: Any, default_port: int = SENTINEL_PORT) -> tuple[str, int]:
    if not text:
        raise bad("a host is missing (empty entry in the host list)")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise bad(f"malformed IPv6 host {text!r}")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
        if ":" in port_text:
            raise bad(f"put IPv6 addresses in brackets: {text!r}")
    if not host:
        raise bad(f"a host is missing in {text!r}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise bad(f"the port in {text!r} is not a number from 1 to 65535")
    return host, int(port_text)


def resend_policy(retries: int, *, aio: bool = False) -> dict[str, Any]:
    """redis-py client options: on a connection error, reconnect and resend up to
    ``retries`` times with a short exponential backoff (capped at 0.5 s). ``aio``: for a
    ``redis.asyncio`` client."""
    import redis
    from redis.backoff import ExponentialBackoff

    if aio:
        from redis.asyncio.retry import Retry
    else:
        from redis.retry import Retry  # type: ignore[assignment]

    return {
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
        "retry_on_error": [redis.ConnectionError],
    }


def connect(url: str, *, aio: bool = False, **kwargs: Any) -> Any:
    """A redis-py client for ``url`` (``kwargs`` go to every data-server connection, e.g.
    ``decode_responses=True``). A Sentinel URL gives ``Sentinel.master_for``'s client:
    always the current primary. ``aio``: the same client from ``redis.asyncio``. Raises
    ``RedisURLError`` for a malformed URL."""
    from redis.backoff import NoBackoff

    if aio:
        import redis.asyncio as redis
        from redis.asyncio.cluster import ClusterNode, RedisCluster
        from redis.asyncio.retry import Retry
        from redis.asyncio.sentinel import Sentinel
    else:
        import redis  # type: ignore[no-redef]
        from redis.cluster import ClusterNode, RedisCluster  # type: ignore[assignment]
        from redis.retry import Retry  # type: ignore[assignment]
        from redis.sentinel import Sentinel  # type: ignore[assignment]

    if kwargs.get("decode_responses"):
        # Bytes that are not UTF-8 (garbage in a job's hash) become U+FFFD instead of
        # failing the whole reply: one such field made `duetime ls` fail for every job of
        # the namespace. Nothing read is written back from Python (the scripts write), and
        # what duetime writes is valid UTF-8 (claims check definitions in Lua first).
        kwargs.setdefault("encoding_errors", "replace")
    url, _ = split_shards(url)
    if is_cluster(url):
        c = parse_cluster(url)
        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in c.nodes],
            username=c.username,
            password=c.password,
            **kwargs,
        )
    if not is_sentinel(url):
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        if scheme not in PLAIN_SCHEMES:
            raise RedisURLError(
                f"unsupported Redis URL scheme {scheme + '://' if scheme else '(none)'} in "
                f"{safe(url)!r}: use redis://, rediss:// (TLS), unix://, {CLUSTER_FORMAT} "
                f"or {FORMAT}"
            )
        _check_host_and_db(url, scheme)
        try:
            client = redis.Redis.from_url(url, **kwargs)
            pool = client.connection_pool  # a connection built, not connected: the URL's
            pool.connection_class(**pool.connection_kwargs)  # options are its arguments
            return client
        except ValueError as exc:  # redis-py's own words lack the URL: "Port could not be..."
            raise RedisURLError(
                f"bad Redis URL {safe(url)!r}: {exc}; expected redis://[user:password@]"
                "host[:port][/db]"
            ) from None
        except TypeError as exc:  # "__init__() got an unexpected keyword argument 'foo'"
            name = re.search(r"argument '(\w+)'", str(exc))
            raise RedisURLError(
                f"bad Redis URL {safe(url)!r}: no option {name[1] if name else '?'}=... "
                "(the query string takes redis-py's connection options, e.g. "
                "?socket_timeout=5&health_check_interval=30)"
            ) from None
    s = parse_sentinel(url)
    # One try per sentinel and discovery: the discovery as a whole is retried by the data
    # connection's own policy (``kwargs``). redis-py's default, 3 retries with backoff
    # of up to 10 s for each sentinel, made a command against dead sentinels take ~8 s
    # and delayed the move past a dead one in a failover.
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT,
        "socket_connect_timeout": SENTINEL_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
    }
    if s.sentinel_password is not None:
        sentinel_kwargs["password"] = s.sentinel_password
    if s.sentinel_username is not None:
        sentinel_kwargs["username"] = s.sentinel_username
    manager = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(s.sentinels), sentinel_kwargs=sentinel_kwargs
    )
    return manager.master_for(  # type: ignore[no-untyped-call, unused-ignore]
        s.service, db=s.db, username=s.username, password=s.password, **kwargs
    )


def _check_host_and_db(url: str, scheme: str) -> None:
    """Refuse a database path that is not a number (redis-py took ``redis://host/abc`` as
    database 0, so a typo wrote to another database than meant), and a URL with no host."""
    if scheme not in ("redis", "rediss"):
        return
    path = url.partition("://")[2].partition("?")[0].partition("#")[0]
    if not urlsplit(url).hostname:
        raise RedisURLError(  # redis-py took redis:// (an empty $HOST, say) as localhost:6379
            f"{safe(url)!r} names no host: give redis://host[:port][/db]"
        )
    db = path.partition("/")[2]
    if db not in ("", "/") and not db.rstrip("/").isdigit():
        raise RedisURLError(
            f"the database in {safe(url)!r} must be a number (redis://host:6379/0), got {db!r}"
        )


# redis-py lists each sentinel that failed as "<its client's repr> - <its error>", the
# error as its repr ("ConnectionError('Error 111 ...')") before 8.2, as "network:
# ConnectionError: Error 111 ..." from 8.2 on; entries are joined with ", "
_SENTINEL_ERROR = re.compile(r" - (.+?)(?=, <redis\.|$)", re.DOTALL)


def no_primary(text: str, where: str) -> str:
    """redis-py's MasterNotFoundError (its text), as one line without the sentinel clients'
    reprs it embeds; ``where``: the URL as ``safe`` shows it."""
    service = re.match(r"No master found for (\S+)", text)
    name = service.group(1) if service else "the service"
    errors = _SENTINEL_ERROR.findall(text)
    why = f" (sentinel errors: {'; '.join(errors)})" if errors else ""
    return (
        f"no sentinel of {where} knows a primary for {name} just now{why}: during a "
        "failover this lasts a few seconds, while the sentinels promote a replica (replicas "
        "retry on their own; run a command again); if it lasts, check that the sentinels "
        "run, the service name (sentinel monitor <name>) and, if they need one, "
        "?sentinel_password="
    )


def close(client: Any) -> None:
    """Close a client made by ``connect``, and its sentinel connections if it has any."""
    client.close()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", []):  # Sentinel.close: redis-py >= 8.1 only
        sentinel.close()


def primary_address(client: Any) -> tuple[str, int] | None:
    """The primary a Sentinel client last connected to, as its pool saw it (no network
    call); None for a plain URL or before the first connection."""
    address = getattr(getattr(client, "connection_pool", None), "master_address", None)
    return (str(address[0]), int(address[1])) if address else None


def primary_moved(client: Any, connection: Any) -> bool:
    """True when a Sentinel client's pool has learnt of a primary other than the server
    ``connection`` is on (a long-lived pub/sub connection must then move)."""
    address = primary_address(client)
    host = getattr(connection, "host", None)
    return address is not None and host is not None and (host, connection.port) != address


def safe(url: Any) -> str:
    """The URL without its password(s), for messages and logs."""
    if not isinstance(url, str):
        return repr(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        scheme, _, rest = url.rpartition("://")
        return f"{scheme}://***@{rest.rpartition('@')[2]}" if "@" in rest else url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user, sep, _ = userinfo.partition(":")
        netloc = f"{user}:***@{hosts}" if sep else netloc
    query = parts.query
    if "password=" in query:
        query = "&".join(
            f"{k}=***" if k.endswith("password") else f"{k}={v}"
            for k, _, v in (item.partition("=") for item in query.split("&"))
        )
    shown = urlunsplit(parts._replace(netloc=netloc, query=query))
    if not netloc and url[len(parts.scheme) :].startswith("://"):  # urlunsplit: unix:/path
        shown = shown.replace(":", "://", 1)  # unix:///path, as given
    return shown
