"""``duetime web``: the web console (scheduler/web/) served by uvicorn."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from scheduler.cli.app import AnyStore

from scheduler.cli.app import (
    EXIT_REFUSED,
    EXIT_USAGE,
    bad_input,
    connect,
    fail,
    main,
    need_url,
    with_url,
)


def _token(token_file: str | None) -> str | None:
    """The token from ``--token-file`` (its first line), else ``$DUETIME_WEB_TOKEN``."""
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as f:
                text = f.readline().strip()
        except OSError as exc:
            fail(f"web: cannot read --token-file {token_file}: {exc.strerror or exc}", EXIT_USAGE)
        if not text:
            fail(f"web: --token-file {token_file} is empty", EXIT_USAGE)
        return text
    return os.environ.get("DUETIME_WEB_TOKEN") or None


@main.command()
@with_url
@click.option(
    "--namespace",
    "-n",
    "namespaces",
    multiple=True,
    envvar="DUETIME_NAMESPACE",
    help="A namespace to serve (repeatable: the console switches between them). "
    "Default: $DUETIME_NAMESPACE, else 'default'.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--actions",
    is_flag=True,
    help="Enable retry, delete, pause, resume, trigger, backfill, cancel and stop (needs a "
    "token or "
    "--trusted-proxy-header). Without it the console is read-only.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="File whose first line is the token that unlocks actions (else $DUETIME_WEB_TOKEN).",
)
@click.option(
    "--token-label",
    default="operator",
    show_default=True,
    help="Who the token's holder is, as recorded in the events of their actions.",
)
@click.option(
    "--trusted-proxy-header",
    default=None,
    metavar="NAME",
    help="A header set by your authenticating proxy that names the user (e.g. "
    "X-Forwarded-User); only safe when the console is reachable through that proxy alone.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host header to answer (repeatable; e.g. the name your proxy forwards). Default: "
    "the loopback names when bound to a loopback address, else any.",
)
@click.option(
    "--redact-args", is_flag=True, help="Never show job arguments (they may hold secrets)."
)
def web(
    redis_url: str | None,
    namespaces: tuple[str, ...],
    host: str,
    port: int,
    actions: bool,
    token_file: str | None,
    token_label: str,
    trusted_proxy_header: str | None,
    allowed_hosts: tuple[str, ...],
    redact_args: bool,
) -> None:
    """Serve the web console: overview, jobs, job detail, running, failed and dead,
    recurring, and a live tail of events; a JSON endpoint behind every page.

    Binds 127.0.0.1 and is read-only unless --actions is given with a token (or behind a
    trusted proxy). Exit 2 if the web extra is missing or the port is taken, 3 if Redis is
    unreachable or refuses."""
    try:
        import jinja2  # noqa: F401
        import redis  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        fail(
            f"web: the web extra is missing ({exc.name}): pip install 'starlette>=0.37' "
            "'uvicorn>=0.30' 'jinja2>=3.1' 'redis[hiredis]>=5.0.2' (duetime's web extra)",
            EXIT_USAGE,
        )
    redis_url = need_url("web", redis_url)
    token = _token(token_file)
    if actions and not token and not trusted_proxy_header:
        raise click.UsageError(
            "--actions needs a token (--token-file or $DUETIME_WEB_TOKEN) or --trusted-proxy-header"
        )
    from scheduler.web import Console, create_app
    from scheduler.web.auth import Auth

    host = host.strip("[]")  # "[::1]", as a URL writes it, binds ::1
    stores = _open(redis_url, namespaces or ("default",))
    console = Console(
        stores=stores,
        url=next(iter(stores.values())).url,
        auth=Auth(actions, token, token_label, trusted_proxy_header),
        redact=redact_args,
        allowed_hosts=_hosts(host, allowed_hosts),
    )
    sock = _listen(host, port)
    port = sock.getsockname()[1]
    click.echo(
        f"duetime web: http://{f'[{host}]' if ':' in host else host}:{port}/ over {console.url} "
        f"({', '.join(stores)}; {'actions enabled' if actions else 'read-only'})",
        err=True,
    )
    if not _loopback(host) and not redact_args:
        click.echo(
            f"duetime web: warning: {host} is reachable from other machines and every page "
            "shows jobs' arguments and errors to anyone who reaches it; put it behind an "
            "authenticating proxy, or pass --redact-args",
            err=True,
        )
    config = uvicorn.Config(create_app(console), log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        for store in stores.values():
            store.close()


def _hosts(host: str, given: tuple[str, ...]) -> list[str] | None:
    """The Host headers to answer: ``given``, plus the loopback names when bound to one."""
    names = ["127.0.0.1", "localhost", "[::1]", "::1"] if _loopback(host) else []
    return [*names, *given] or None


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (exit 2 in one line if it is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        fail(
            f"web: cannot listen on {host}:{port} ({exc.strerror or exc}): choose another "
            "--port or --host, or stop what holds it",
            EXIT_USAGE,
        )
    return sock


def _open(redis_url: str, namespaces: tuple[str, ...]) -> dict[str, AnyStore]:
    """The store of each namespace, checked once (a PING and the shard count)."""
    from scheduler.stores.redis import ShardCountError
    from scheduler.stores.redis.sharding.shards import check_count

    stores: dict[str, AnyStore] = {}
    for ns in dict.fromkeys(namespaces):
        try:
            store = connect(redis_url, ns)
        except ValueError as exc:
            bad_input(exc)
        store.redis.ping()
        try:
            check_count(store.redis, store.parts[0].keys, store.url, record=False)
        except ShardCountError as exc:
            fail(str(exc), EXIT_REFUSED)
        stores[ns] = store
    return stores


def _loopback(host: str) -> bool:
    """Whether ``host`` (what --host binds) is reachable from this machine only."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything
