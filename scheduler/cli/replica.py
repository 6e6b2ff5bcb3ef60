"""``duetime run``: a replica that claims the due jobs of a namespace and runs them."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from typing import Any

import click

from scheduler.cli.app import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    TIMEOUT,
    main,
    namespace_option,
    redis_option,
    redis_url_or_embedded,
    remember_url,
    shards_option,
    timeout_option,
    with_wait_options,
)


@main.command()
@redis_option
@namespace_option
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Import MODULE to register its @task functions (repeatable).",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Also import task modules from DIR (repeatable; the working directory is searched "
    "too, as python -m does).",
)
@timeout_option
@click.option("--workers", default=4, show_default=True, help="Workers of the default lane.")
@click.option(
    "--lane",
    "lanes",
    multiple=True,
    metavar="NAME=SIZE",
    help="An extra lane with its own workers (repeatable).",
)
@click.option(
    "--lease",
    default=30.0,
    show_default=True,
    help="Claim lease in seconds; renewed every lease/3 while a job runs.",
)
@click.option(
    "--resync",
    default=5.0,
    show_default=True,
    help="Safety re-claim period in seconds (jittered), besides wake-ups.",
)
@click.option(
    "--shutdown-timeout",
    default=30.0,
    show_default=True,
    help="On SIGTERM/SIGINT, how long running jobs may take to finish.",
)
@click.option("--data-dir", default=None, help="Data directory of the embedded Redis.")
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line with job/invocation fields.",
)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    envvar="DUETIME_METRICS_PORT",
    help="Serve Prometheus metrics on this port (needs duetime[metrics]).",
)
@with_wait_options
@shards_option
def run(
    redis_url: str | None,
    namespace: str,
    imports: tuple[str, ...],
    paths: tuple[str, ...],
    workers: int,
    lanes: tuple[str, ...],
    lease: float,
    resync: float,
    shutdown_timeout: float,
    data_dir: str | None,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    wait_replicas: int,
    wait_timeout_ms: int,
    shards: int | None,
) -> None:
    """Run a replica: claim due jobs of NAMESPACE and run them until SIGTERM/SIGINT
    (then: stop claiming, hand back unstarted claims, let running jobs finish)."""
    from scheduler import log

    log.setup(log_level, log_format)
    import_tasks(imports, paths)
    sizes = dict(_lane(spec) for spec in lanes)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from scheduler.engine import Scheduler
    from scheduler.stores.redis import (
        ShardCountError,
        StoreConfigError,
        StoreUnavailableError,
        open_store,
    )

    owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with redis_url_or_embedded(redis_url, data_dir) as url:
        preflight(url)
        try:
            store = open_store(
                url,
                namespace,
                shards=shards,
                lease=lease,
                resync=resync,
                wait_replicas=wait_replicas,
                wait_timeout_ms=wait_timeout_ms,
            )
        except ValueError as exc:  # a malformed URL or namespace
            raise click.UsageError(str(exc)) from None
        try:
            store.check_server()  # refuses eviction and old servers; warns if AOF is off
        except (StoreConfigError, ShardCountError) as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(EXIT_REFUSED) from None
        except StoreUnavailableError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(EXIT_UNREACHABLE) from None
        engine = Scheduler(
            workers, store=store, lanes=sizes, owner=owner, metrics=_metrics(store, metrics_port)
        )
        logging.getLogger("duetime").info(
            "replica %s running namespace %r at %s with lanes %s",
            owner,
            namespace,
            store.url,
            {"default": workers, **sizes},
        )
        stop.wait()
        logging.getLogger("duetime").info("replica %s shutting down", owner)
        engine.shutdown(wait=True, timeout=shutdown_timeout)
        store.close()


def import_tasks(modules: tuple[str, ...], paths: tuple[str, ...]) -> None:
    """Import the task modules as ``python -m`` would find them: from the working
    directory, and from each ``--path`` first. A module that cannot be imported ends
    the command with one line (exit 2)."""
    for entry in reversed((os.getcwd(), *paths)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    for module in modules:
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code at import
            where = ", ".join(paths) or os.getcwd()
            raise click.UsageError(
                f"cannot import task module {module!r} ({type(exc).__name__}: {exc}); run "
                f"from the folder that holds it, or pass --path DIR (searched: {where})"
            ) from None


def preflight(url: str) -> None:
    """One PING bounded by --timeout before anything else (a server that never answers
    fails here, at once, instead of hanging the replica's start)."""
    from scheduler.stores.redis import urls

    remember_url(url)
    timeout = click.get_current_context().meta.get("duetime.timeout", TIMEOUT)
    client = urls.connect(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    finally:
        urls.close(client)


def _metrics(store: Any, port: int | None) -> Any:
    """Prometheus metrics on ``port`` (namespace gauges read from the store per scrape)."""
    if port is None:
        return None
    from scheduler.metrics import PrometheusMetrics
    from scheduler.stores.redis import queries

    def namespace() -> dict[str, Any]:
        # only what the gauges show (stats() would also read thousands of events)
        return {
            "queue_depth": queries.queue_depths(store),
            "running": queries.running_count(store),
            "replicas": len(queries.replicas(store)),
            "events": queries.counters(store),
            "quarantined": queries.quarantined_count(store),
        }

    metrics = PrometheusMetrics(namespace_source=namespace)
    try:
        metrics.serve(port)
    except OSError as exc:
        raise click.UsageError(
            f"cannot serve metrics on port {port} ({exc.strerror or exc}): choose another "
            "--metrics-port, or stop what holds it"
        ) from None
    return metrics


def _lane(text: str) -> tuple[str, int]:
    name, _, size = text.partition("=")
    if not name or not size.isdigit() or int(size) < 1:
        raise click.BadParameter(f"expected NAME=SIZE with SIZE >= 1, got {text!r}")
    return name, int(size)
