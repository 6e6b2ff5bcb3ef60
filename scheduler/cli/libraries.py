"""``duetime libraries``: this version's Redis Functions libraries on a server (Redis 7+;
docs/decisions.md, *Redis Functions*): ``ls`` (which are loaded, which other duetime
libraries stay from other versions), ``load`` (every one, as an administrator does where
the users may call a function but not load a library, deploy/README.md) and ``prune`` (the
other versions' libraries deleted: always safe, a client that needs one loads it again).

A library is server-wide, not a namespace's. Exit codes as for every command (app.py):
a server without Redis Functions, or a user without the right, is one line, exit 1."""

from __future__ import annotations

from typing import Any, NoReturn

import click

from scheduler.cli.app import EXIT_REFUSED, bounded_client, fail, main, need_url, with_url
from scheduler.stores.redis.protocol import scripts, urls

PREFIX = "duetime_"


def ours() -> dict[str, str]:
    """This version's libraries: name -> code."""
    return dict(scripts.library(name) for name in scripts.SCRIPTS)


def loaded(client: Any) -> list[str]:
    """The names of the duetime libraries on ``client``'s server (one node of a cluster:
    every primary holds the same ones)."""
    names = []
    for lib in client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", PREFIX + "*"):
        fields = dict(zip(lib[::2], lib[1::2], strict=True)) if isinstance(lib, list) else lib
        names.append(str(fields["library_name"]))
    # duetime's own names only: another library named duetime_... is someone else's
    return sorted(n for n in names if scripts.LIBRARY_NAME.match(n))


def _client(command: str, redis_url: str | None) -> Any:
    url = need_url(f"libraries {command}", redis_url)
    return bounded_client(urls.split_shards(url)[0], decode_responses=True)


def _refused(exc: Exception) -> NoReturn:
    text = str(exc)
    if "unknown command" in text.lower():
        fail(
            "this server has no Redis Functions (Redis 7 or later): duetime sends "
            "its scripts there by their SHA1; nothing to do",
            EXIT_REFUSED,
        )
    fail(text, EXIT_REFUSED)


@main.group()
def libraries() -> None:
    """This version's Redis Functions libraries on a server (Redis 7 and later)."""


@libraries.command("ls")
@with_url
def libraries_ls(redis_url: str | None) -> None:
    """Which of this version's libraries are loaded, and the other duetime libraries."""
    import redis

    client = _client("ls", redis_url)
    try:
        here = set(loaded(client))
    except redis.ResponseError as exc:
        _refused(exc)
    finally:
        urls.close(client)
    mine = ours()
    for name in sorted(mine):
        click.echo(f"{name}  {'loaded' if name in here else 'not loaded (loaded on first use)'}")
    for name in sorted(here - set(mine)):
        click.echo(f"{name}  another version's (duetime libraries prune deletes it)")


@libraries.command("load")
@with_url
def libraries_load(redis_url: str | None) -> None:
    """Load every library of this version not loaded yet (every primary of a cluster)."""
    import redis

    client = _client("load", redis_url)
    try:
        here, added = set(loaded(client)), 0
        for name, code in sorted(ours().items()):
            if name not in here:
                client.function_load(code)
                added += 1
    except redis.ResponseError as exc:
        _refused(exc)
    finally:
        urls.close(client)
    click.echo(f"{added} loaded, {len(here & set(ours()))} already there")


@libraries.command("prune")
@with_url
def libraries_prune(redis_url: str | None) -> None:
    """Delete the duetime libraries of other versions (safe at any time: a client of such a
    version loads its library again on its next call)."""
    import redis

    client = _client("prune", redis_url)
    try:
        old = [name for name in loaded(client) if name not in ours()]
        for name in old:
            client.function_delete(name)
    except redis.ResponseError as exc:
        _refused(exc)
    finally:
        urls.close(client)
    click.echo(f"{len(old)} deleted")
