"""The ``duetime`` command group and what its commands share: exit codes, options, and
opening a namespace for one command (errors become one line and an exit code).

Exit codes: 0 success; 1 the operation was refused or had no effect (nothing to cancel,
pause or resume; an unknown job for ``show``; a replica refused an unsafe server); 2 bad
usage or setup (click's own, a missing URL, a malformed job id or namespace, a task module
that cannot be imported, a replica with no task, a missing extra, a metrics port in use);
3 the store could not be reached (connection refused, no answer within ``--redis-timeout``),
refused the credentials or the command (NOAUTH, WRONGPASS, NOPERM: the message names the
user and the command), or answered with an error. Whatever fails, the command ends with
one line on stderr, never a traceback (``DUETIME_TRACEBACK=1`` shows it, for a bug report).
"""

from __future__ import annotations

import io
import math
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from scheduler.stores.redis import RedisStore, ShardedStore

    AnyStore = RedisStore | ShardedStore

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
TIMEOUT = 5.0  # seconds: the longest any Redis call of a command may take

redis_option = click.option(
    "--redis",
    "redis_url",
    envvar="DUETIME_REDIS_URL",
    default=None,
    metavar="URL",
    help="Redis URL (redis://, rediss:// for TLS; user:password@ for AUTH/ACL; "
    "redis+sentinel://host1:26379,host2:26379/SERVICE[/DB] for Sentinel; "
    "redis+cluster://host1:7000,host2:7001 for Redis Cluster). "
    "Required, unless --embedded; default: $DUETIME_REDIS_URL.",
)
url_option = click.option(
    "--redis",
    "redis_url",
    envvar="DUETIME_REDIS_URL",
    default=None,
    metavar="URL",
    help="Redis URL of the namespace (redis://, rediss://; user:password@ for AUTH/ACL; "
    "redis+sentinel://host1:26379,host2:26379/SERVICE[/DB]; redis+cluster://...). "
    "Required; default: $DUETIME_REDIS_URL.",
)
shards_option = click.option(
    "--shards",
    type=click.IntRange(min=1, max=1024),
    default=None,
    envvar="DUETIME_SHARDS",
    help="The namespace's shard count (default: the URL's ?shards=N, else 1). Fixed per "
    "namespace: every replica and producer must use the same.",
)
wait_options = [
    click.option(
        "--wait-replicas",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        envvar="DUETIME_WAIT_REPLICAS",
        help="After each write, WAIT until this many Redis replicas have it "
        "(narrows what a failover loses; costs a replication round trip).",
    ),
    click.option(
        "--wait-timeout-ms",
        type=click.IntRange(min=1),
        default=100,
        show_default=True,
        envvar="DUETIME_WAIT_TIMEOUT_MS",
        help="Longest WAIT per write; a write not confirmed in time is logged "
        "and counted, not undone.",
    ),
]


def check_wait(wait_replicas: int, wait_timeout_ms: int) -> None:
    """Refuse a WAIT that cannot end within a Redis call's time (``--redis-timeout``, less
    the write's own: a second, or half of it): its reply would come after the client gave
    up, and the write would be reported as Redis not answering."""
    call_ms = click.get_current_context().meta.get("duetime.timeout", TIMEOUT) * 1000
    most = call_ms - min(1000, call_ms / 2)
    if wait_replicas and wait_timeout_ms > most:
        raise click.UsageError(
            f"--wait-timeout-ms {wait_timeout_ms} is over {most:.0f}, the most a WAIT may take "
            f"within --redis-timeout {call_ms / 1000:g}s: lower it, or raise --redis-timeout"
        )


namespace_option = click.option(
    "--namespace",
    "-n",
    envvar="DUETIME_NAMESPACE",
    default="default",
    show_default=True,
    help="Key namespace: replicas and producers of one namespace share its jobs.",
)
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the data as JSON (times as epoch seconds and ISO, UTC).",
)
job_argument = click.argument("job_id", metavar="ID")


class FiniteRange(click.FloatRange):
    """A ``FloatRange`` that also refuses nan and infinity: click compares the
    bounds, and every comparison with nan is false (``--switch-interval nan`` aborted
    the interpreter, ``--summary-every nan`` logged in a busy loop)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def _remember_timeout(ctx: click.Context, _param: Any, value: float) -> float:
    ctx.meta["duetime.timeout"] = value
    return value


_redis_timeout = click.option(
    "--redis-timeout",
    type=FiniteRange(min=0.1, max=3600),
    default=TIMEOUT,
    show_default=True,
    envvar=["DUETIME_REDIS_TIMEOUT", "DUETIME_TIMEOUT"],
    expose_value=False,
    is_eager=True,
    callback=_remember_timeout,
    help="Seconds any one Redis call may take before the command gives up (exit 3).",
)


def _renamed_timeout(_ctx: click.Context, _param: Any, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(
            "--timeout is now --redis-timeout (the seconds any one Redis call may take); a "
            "job's own timeout is `duetime enqueue --job-timeout`"
        )


_old_timeout = click.option(  # the old spelling, which named two things: refused
    "--timeout",
    hidden=True,
    default=None,
    expose_value=False,
    callback=_renamed_timeout,
)


def timeout_option(fn: Any) -> Any:
    """``--redis-timeout``, and the old ``--timeout`` refused with the new names."""
    return _redis_timeout(_old_timeout(fn))


def with_url(fn: Any) -> Any:
    """``--redis URL`` (required) and ``--redis-timeout``: what every namespace command
    takes."""
    return url_option(timeout_option(fn))


def with_wait_options(fn: Any) -> Any:
    for option in reversed(wait_options):
        fn = option(fn)
    return fn


class DuetimeGroup(click.Group):
    """The command group: an exception that escapes a command becomes one line on stderr
    and a documented exit code (explain()), never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            raise SystemExit(130) from None
        except BrokenPipeError:  # the reader went away (`| head`): quiet, as Unix tools are
            try:  # nor a second error at the exit's flush
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):  # a stdout without a file descriptor
                pass
            raise SystemExit(141) from None  # 128 + SIGPIPE, as 130 is 128 + SIGINT
        except Exception as exc:  # noqa: BLE001 - the one place errors become a line
            if os.environ.get("DUETIME_TRACEBACK"):
                raise
            code, message = explain(exc, ctx)
            click.echo(f"error: {message}", err=True)
            raise SystemExit(code) from None


@click.group(cls=DuetimeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="duetime")
def main() -> None:
    """duetime: run each job at its time, once."""
    for stream in (sys.stdout, sys.stderr):  # a job id a latin-1 terminal cannot show was
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":  # exit 2
            stream.reconfigure(errors="backslashreplace")


def _user(ctx: click.Context) -> str:
    """The Redis user of the command's URL (``default`` when it names none)."""
    from urllib.parse import unquote, urlsplit

    url = _find_url(ctx)
    try:
        name = urlsplit(url).username if url else None
    except ValueError:
        name = None
    return unquote(name) if name else "default"


def _find_url(ctx: click.Context | None) -> str | None:
    """The URL the failing command used (``remember_url``), else the environment's."""
    if ctx is not None and ctx.meta.get("duetime.url"):
        return str(ctx.meta["duetime.url"])
    while ctx is not None:
        url = ctx.params.get("redis_url")
        if url:
            return str(url)
        ctx = ctx.parent
    return os.environ.get("DUETIME_REDIS_URL")


_REFUSED = re.compile(r"(?:run the '(?P<cmd>[\w|]+)' command|can't run this command)", re.I)


def explain(exc: BaseException, ctx: click.Context) -> tuple[int, str]:
    """(exit code, one line that says what to do) for an error a command did not handle."""
    from scheduler.errors import DuetimeError

    sub = ctx.invoked_subcommand or ctx.info_name or "duetime"
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing in ("redis", "hiredis"):
        return EXIT_USAGE, (
            "the Redis client is not installed: pip install 'redis[hiredis]>=5.0.2' "
            "(duetime's redis extra)"
        )
    if missing == "prometheus_client":
        return EXIT_USAGE, (
            "metrics need prometheus-client: pip install 'prometheus-client>=0.20' "
            "(duetime's metrics extra)"
        )
    try:
        import redis
        from redis.exceptions import RedisClusterException
    except ImportError:  # pragma: no cover - handled above when a command needed it
        redis = None  # type: ignore[assignment]
    from scheduler.errors import StoreFullError

    if isinstance(exc, StoreFullError):  # the library's line, not its cause's raw text
        return EXIT_UNREACHABLE, str(exc)
    cause = exc.__cause__
    if redis is not None and isinstance(cause, redis.RedisError | RedisClusterException):
        exc = cause  # StoreUnavailableError
    if redis is not None and isinstance(exc, RedisClusterException):  # not a RedisError
        return EXIT_UNREACHABLE, _cluster_error(exc, ctx)
    if redis is not None and isinstance(exc, redis.RedisError):
        return EXIT_UNREACHABLE, _redis_error(exc, ctx)
    if isinstance(exc, ConnectionError | TimeoutError):  # StoreUnavailableError too
        return EXIT_UNREACHABLE, str(exc)
    if isinstance(exc, ValueError | TypeError):
        return EXIT_USAGE, f"{sub}: {exc}"
    if isinstance(exc, DuetimeError):
        return EXIT_REFUSED, str(exc)
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""  # which path: --data-dir, ...
        return EXIT_USAGE, f"{sub}: {exc.strerror or exc}{where}"
    return EXIT_REFUSED, (
        f"{sub} failed unexpectedly: {type(exc).__name__}: {exc} (a bug? run again with "
        "DUETIME_TRACEBACK=1 and report the traceback)"
    )


def _redis_error(exc: BaseException, ctx: click.Context) -> str:
    import redis
    from redis.sentinel import MasterNotFoundError

    from scheduler.stores.redis.integrity import server_checks
    from scheduler.stores.redis.protocol import urls

    where = urls.safe(_find_url(ctx) or "?")
    text = str(exc).strip()
    user = _user(ctx)
    # "Protocol error: unauthenticated multibulk length": a server that needs a password
    # closes on a long command sent without one (RESP2 clients: redis-py < 8 sends no HELLO)
    if (
        isinstance(exc, redis.AuthenticationError)
        or text.upper().startswith(("WRONGPASS", "NOAUTH", "INVALID USERNAME"))
        or "unauthenticated" in text
    ):
        if not _has_password(ctx):
            return (
                f"Redis at {where} requires a password ({text}): give it in the URL, "
                "redis://:PASSWORD@host:port (or USER:PASSWORD@ for an ACL user)"
            )
        return (
            f"Redis at {where} refused the credentials of user {user!r} ({text}): check the "
            "user:password of the URL"
        )
    refused = _REFUSED.search(text)
    if isinstance(exc, redis.exceptions.NoPermissionError) or refused or "NOPERM" in text.upper():
        command = refused.group("cmd") if refused and refused.group("cmd") else None
        what = f"run {command!r}" if command else "do this"
        if "access" in text.lower() and ("key" in text.lower() or "channel" in text.lower()):
            what = "read or write this namespace's keys"  # a key pattern the user lacks
        return (
            f"Redis user {user!r} may not {what} at {where} ({text}): grant it in the "
            "user's ACL (deploy/users.acl lists what each role needs)"
        )
    if isinstance(exc, redis.exceptions.OutOfMemoryError):  # StoreFullError's cause too
        return server_checks.full_message(where)
    handshake = server_checks.handshake_refused(exc, where)
    if handshake is not None:  # a database the server lacks; a sentinel for a server, or back
        return str(handshake)
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return str(server_checks.unreachable(exc, where))
    if isinstance(exc, MasterNotFoundError):
        return urls.no_primary(text, where)
    if isinstance(exc, redis.ReadOnlyError) or text.upper().startswith("READONLY"):
        return (
            f"Redis at {where} is a read-only replica ({text}): give the primary's address, "
            "or a redis+sentinel:// URL that finds it"
        )
    if isinstance(exc, redis.TimeoutError):
        timeout = ctx.meta.get("duetime.timeout", TIMEOUT)
        tls = (
            " (a rediss:// URL: does that port serve TLS? a plain server never answers the "
            "handshake)"
            if where.lower().startswith("rediss://")
            else ""
        )
        return f"Redis at {where} did not answer within {timeout:g}s (--redis-timeout): {text}{tls}"
    if isinstance(exc, redis.ConnectionError):
        hint = server_checks.tls_refused(text) or "is it running, and is the URL right?"
        return f"cannot reach Redis at {where}: {text}; {hint}"
    return f"Redis at {where} answered with an error: {text}"


def _has_password(ctx: click.Context) -> bool:
    """Whether the command's URL carries a password (``user:password@`` or ``:password@``)."""
    from urllib.parse import urlsplit

    url = _find_url(ctx)
    try:
        return bool(url and urlsplit(url).password is not None)
    except ValueError:
        return False


def _cluster_error(exc: BaseException, ctx: click.Context) -> str:
    """redis-py's RedisClusterException (which is not a RedisError), as one line."""
    from scheduler.stores.redis.protocol import urls

    where = urls.safe(_find_url(ctx) or "?")
    text = str(exc).strip()
    if "cluster mode is not enabled" in text.lower():
        return (
            f"Redis at {where} is not a cluster (cluster mode is not enabled on it): use "
            "redis://host:port for a single server"
        )
    return f"cannot use the Redis Cluster at {where}: {text}"


def fail(message: str, code: int) -> NoReturn:
    """End the command with ``error: message`` on stderr and exit ``code``."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


BAD_INPUT_CLIP = 1000  # characters of a refusal shown (it may quote a 1 MB expression)


def bad_input(exc: Exception) -> NoReturn:
    """End the command for input it refused (a ValueError or TypeError of the library):
    one line, ``error: <what to fix>``, exit 2, as every bad option is reported."""
    text = " ".join(str(exc).split())
    if len(text) > BAD_INPUT_CLIP:
        text = text[: BAD_INPUT_CLIP - 30] + f"... ({len(text):,} characters)"
    fail(text, EXIT_USAGE)


def need_url(command: str, redis_url: str | None, alternative: str = "") -> str:
    """The command's URL; without one (no --redis, no DUETIME_REDIS_URL) the command ends
    with one line, exit 2. ``alternative`` ends the line (another way, if there is one)."""
    if not redis_url:
        fail(f"{command} needs --redis URL (or DUETIME_REDIS_URL){alternative}", EXIT_USAGE)
    return redis_url


@contextmanager
def redis_url_or_embedded(url: str | None, data_dir: str | None = None) -> Iterator[str]:
    """The given URL, or an embedded server started for the duration (AOF on): what
    ``demo`` does without a URL and ``run --embedded`` always (scheduler/embedded.py:
    the server ends with this process, even a killed one)."""
    if url:
        yield url
        return
    import redis  # noqa: F401 - no client: say so (explain) before a server is started

    from scheduler.embedded import EmbeddedRedis

    with EmbeddedRedis(data_dir=data_dir, appendonly=True) as server:
        binary = os.path.basename(str(server.binary))
        click.echo(
            f"started an embedded Redis ({binary}) at {server.url} (data in {server.dir})",
            err=True,
        )
        yield server.url


def remember_url(url: str) -> None:
    """Note the URL a command talks to, for its error messages (contexts share meta)."""
    click.get_current_context().meta["duetime.url"] = url


def bounded_client(url: str, **kwargs: Any) -> Any:
    """A redis-py client for ``url`` whose every call is bounded by ``--redis-timeout``
    (the URL is remembered for the command's error messages)."""
    from scheduler.stores.redis.protocol import urls

    remember_url(url)
    timeout = click.get_current_context().meta.get("duetime.timeout", TIMEOUT)
    return urls.connect(url, socket_timeout=timeout, socket_connect_timeout=timeout, **kwargs)


def preflight(url: str) -> None:
    """One PING bounded by --redis-timeout before anything else (a server that never answers
    fails here, at once, instead of hanging a replica's or the demo's start)."""
    from scheduler.stores.redis.protocol import urls

    client = bounded_client(url)
    try:
        client.ping()
    finally:
        urls.close(client)


def connect(
    redis_url: str, namespace: str, *, shards: int | None = None, **kwargs: Any
) -> AnyStore:
    """The store of a namespace for one command: every Redis call bounded by
    ``--redis-timeout``, no reconnect-and-resend (a command fails at once and says why); a
    ``ShardedStore`` if the URL says ``?shards=N`` or $DUETIME_SHARDS is set."""
    from scheduler.stores.redis import open_store
    from scheduler.stores.redis.protocol import urls

    base, shards = urls.shard_count(redis_url, shards, os.environ.get("DUETIME_SHARDS"))
    client = bounded_client(base, decode_responses=True)
    remember_url(redis_url)  # the full URL, not the one without ?shards=N
    store = open_store(client, namespace, shards=shards, **kwargs)
    store.url = urls.safe(redis_url)
    for part in store.parts:
        part.url = store.url
    return store


@contextmanager
def open_namespace(command: str, redis_url: str | None, namespace: str) -> Iterator[AnyStore]:
    """The store of a namespace for one command (``connect``): no URL is a usage error
    (2); an unknown shard count refuses (1); any other failure becomes one line and an
    exit code in ``DuetimeGroup``. Closed afterwards."""
    redis_url = need_url(command, redis_url)
    from scheduler.stores.redis import ShardCountError
    from scheduler.stores.redis.sharding.shards import check_count

    try:
        store = connect(redis_url, namespace)
    except ValueError as exc:  # a malformed URL, namespace or shard count
        bad_input(exc)
    try:
        check_count(store.redis, store.parts[0].keys, store.url, record=False)
        yield store
    except ShardCountError as exc:
        fail(str(exc), EXIT_REFUSED)
    finally:
        store.close()


def job_id_of(job_id: str) -> str:
    """A job id given on the command line, validated (a usage error if malformed)."""
    from scheduler import validation

    try:
        return validation.job_id(job_id)
    except (ValueError, TypeError) as exc:
        bad_input(exc)
