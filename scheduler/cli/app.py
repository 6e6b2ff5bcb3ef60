"""The ``duetime`` command group and what its commands share: exit codes, options, and
opening a namespace for one command (errors become one line and an exit code).

Exit codes: 0 success; 1 the operation was refused or had no effect (nothing to cancel,
pause or resume; an unknown job for ``show``; a replica refused an unsafe server); 2 bad
usage (click's own, a missing URL, a malformed job id or namespace); 3 the store could not
be reached (connection, timeout, authentication) or answered with an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from scheduler.stores.redis import RedisStore, ShardedStore

    AnyStore = RedisStore | ShardedStore

EXIT_REFUSED, EXIT_UNREACHABLE = 1, 3

redis_option = click.option(
    "--redis",
    "redis_url",
    envvar="DUETIME_REDIS_URL",
    default=None,
    metavar="URL",
    help="Redis URL (redis://, rediss:// for TLS; user:password@ for AUTH/ACL; "
    "redis+sentinel://host1:26379,host2:26379/SERVICE[/DB] for Sentinel; "
    "redis+cluster://host1:7000,host2:7001 for Redis Cluster). "
    "Default: $DUETIME_REDIS_URL, else an embedded local server.",
)
url_option = click.option(
    "--redis",
    "redis_url",
    envvar="DUETIME_REDIS_URL",
    default=None,
    metavar="URL",
    help="Redis URL of the namespace (redis://, rediss://; user:password@ for AUTH/ACL; "
    "redis+sentinel://host1:26379,host2:26379/SERVICE[/DB]). "
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


def with_wait_options(fn: Any) -> Any:
    for option in reversed(wait_options):
        fn = option(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="duetime")
def main() -> None:
    """duetime: run each job at its time, once."""


def fail(message: str, code: int) -> NoReturn:
    """End the command with ``error: message`` on stderr and exit ``code``."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


@contextmanager
def redis_url_or_embedded(url: str | None, data_dir: str | None = None) -> Iterator[str]:
    """The given URL, or an embedded server started for the duration (AOF on)."""
    if url:
        yield url
        return
    from scheduler.embedded import EmbeddedRedis

    with EmbeddedRedis(data_dir=data_dir, appendonly=True) as server:
        click.echo(f"started an embedded Redis at {server.url} (data in {server.dir})", err=True)
        yield server.url


@contextmanager
def open_namespace(command: str, redis_url: str | None, namespace: str) -> Iterator[AnyStore]:
    """A RedisStore for one command (a ShardedStore if the URL says ``?shards=N`` or
    $DUETIME_SHARDS is set): no URL is a usage error (2); a
    Redis that cannot be reached, or that answers with an error, ends the command with a
    message (3)."""
    if not redis_url:
        raise click.UsageError(f"{command} needs --redis URL (or DUETIME_REDIS_URL)")
    import redis

    from scheduler.stores.redis import ShardCountError, StoreUnavailableError, open_store
    from scheduler.stores.redis.shards import check_count

    shards = os.environ.get("DUETIME_SHARDS") or None  # else the URL's ?shards=N, else 1
    try:
        store = open_store(redis_url, namespace, shards=None if shards is None else int(shards))
    except ValueError as exc:  # a malformed URL, namespace or shard count
        raise click.UsageError(str(exc)) from None
    try:
        check_count(store.redis, store.parts[0].keys, store.url, record=False)
        yield store
    except StoreUnavailableError as exc:
        fail(str(exc), EXIT_UNREACHABLE)
    except ShardCountError as exc:
        fail(str(exc), EXIT_REFUSED)
    except (redis.ConnectionError, redis.TimeoutError) as exc:  # AuthenticationError too
        fail(f"cannot reach Redis at {store.url}: {exc}", EXIT_UNREACHABLE)
    except redis.RedisError as exc:
        fail(f"Redis at {store.url} answered with an error: {exc}", EXIT_UNREACHABLE)
    finally:
        store.close()


def job_id_of(job_id: str) -> str:
    """A job id given on the command line, validated (a usage error if malformed)."""
    from scheduler import validation

    try:
        return validation.job_id(job_id)
    except (ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None
