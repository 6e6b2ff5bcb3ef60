"""``duetime run``: a replica that claims the due jobs of a namespace and runs them."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any

import click

from scheduler.cli import lane_flags
from scheduler.cli.app import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    FiniteRange,
    bad_input,
    check_wait,
    fail,
    main,
    namespace_option,
    need_url,
    preflight,
    redis_option,
    redis_url_or_embedded,
    shards_option,
    timeout_option,
    with_wait_options,
)
from scheduler.cli.taskmods import import_tasks

if TYPE_CHECKING:
    from scheduler.engine import Scheduler
    from scheduler.signals import Signals


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
@click.option(
    "--allow-no-tasks",
    is_flag=True,
    help="Start even though no @task is registered (by default that refuses, exit 2). "
    "Such a replica claims jobs like any other and each one fails as an unknown task: "
    "only for a namespace with nothing due, e.g. to try a deployment's URL, credentials "
    "and metrics endpoint.",
)
@timeout_option
@click.option(
    "--workers",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),  # the upper bound: the pool's own check (workers/pool.py)
    help="Workers of the default lane.",
)
@click.option(
    "--lane",
    "lanes",
    multiple=True,
    metavar="NAME=SIZE[:process]",
    help="An extra lane with its own workers (repeatable). ':process' runs its jobs in "
    "worker processes that a timeout stops (SIGTERM, then SIGKILL), with options after a "
    "comma: reports=2:process,max_jobs=500,max_memory_mb=800,kill_grace=5 (docs/lanes.md).",
)
@click.option(
    "--lease",
    default=30.0,
    show_default=True,
    type=FiniteRange(0.5, 86400.0),
    help="Claim lease in seconds; renewed every lease/3 while a job runs (shorter than "
    "0.5 s, a pause of the process or of Redis would lose it, and its job would run again).",
)
@click.option(
    "--resync",
    default=5.0,
    show_default=True,
    type=FiniteRange(0.05, 3600.0),
    help="Safety re-claim period in seconds (jittered), besides wake-ups.",
)
@click.option(
    "--shutdown-timeout",
    default=30.0,
    show_default=True,
    type=FiniteRange(0, 86400),
    help="On SIGTERM/SIGINT, how long running jobs may take to finish, in all; jobs "
    "still running then are handed back (their leases end: other replicas run them again).",
)
@click.option(
    "--embedded",
    is_flag=True,
    help="Start a throwaway redis-server on 127.0.0.1 for this replica, instead of --redis "
    "(a trial on one machine: it ends with this process, even a killed one, and its data "
    "with it).",
)
@click.option(
    "--data-dir",
    default=None,
    metavar="DIR",
    help="With --embedded: the server's data directory, kept after exit (default: a temp "
    "dir, removed).",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line with job/invocation fields.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    envvar="DUETIME_METRICS_PORT",
    help="Serve /metrics (Prometheus; needs duetime[metrics]), /healthz and /readyz on this port.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    envvar="DUETIME_METRICS_HOST",
    metavar="ADDR",
    help="The address --metrics-port binds: 0.0.0.0 (or this host's address) to be "
    "scraped from elsewhere, e.g. in a container.",
)
@click.option(
    "--summary-every",
    type=FiniteRange(min=0, max=86400),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Log a one-line summary (jobs succeeded/failed/retried, lag and queue-wait "
    "percentiles) this often at INFO; 0: never.",
)
@click.option(
    "--switch-interval",
    type=FiniteRange(min=0.05, max=100.0),
    default=1.0,
    show_default=True,
    envvar="DUETIME_SWITCH_INTERVAL",
    metavar="MS",
    help="How long one thread may keep the GIL while another waits for it (Python's own "
    "default is 5 ms). While jobs run Python code, each hand-off from the dispatcher to a "
    "worker waits up to this long, so due jobs start that much later.",
)
@click.option(
    "--tracing",
    is_flag=True,
    expose_value=False,
    callback=lambda _ctx, _param, on: _trace(on),
    help="An OpenTelemetry span per job run and per enqueue of this process (needs "
    "duetime[otel] and an SDK configured in it, e.g. by opentelemetry-instrument or an "
    "--import module; docs/tracing.md): DUETIME_TRACING=1 for this process.",
)
@with_wait_options
@shards_option
def run(
    redis_url: str | None,
    namespace: str,
    imports: tuple[str, ...],
    paths: tuple[str, ...],
    allow_no_tasks: bool,
    workers: int,
    lanes: tuple[str, ...],
    lease: float,
    resync: float,
    shutdown_timeout: float,
    embedded: bool,
    data_dir: str | None,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    summary_every: float,
    switch_interval: float,
    wait_replicas: int,
    wait_timeout_ms: int,
    shards: int | None,
) -> None:
    """Run a replica: claim due jobs of NAMESPACE and run them until SIGTERM/SIGINT
    (then: stop claiming, hand back unstarted claims, let running jobs finish). Needs
    --redis URL (or --embedded) and a task (--import), unless --allow-no-tasks."""
    from scheduler import log

    _check_where(redis_url, embedded, data_dir)
    check_wait(wait_replicas, wait_timeout_ms)
    log.setup(log_level, log_format)
    import_tasks(imports, paths, allow_none=allow_no_tasks)
    sizes = lane_flags.parse(lanes)
    requests = _StopRequests.installed()
    from scheduler.engine import Scheduler
    from scheduler.recorder import Recorder
    from scheduler.signals import Signals

    owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with redis_url_or_embedded(None if embedded else redis_url, data_dir) as url:
        preflight(url)
        store = _open_checked(
            url,
            namespace,
            shards=shards,
            lease=lease,
            resync=resync,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
        )
        signals = Signals(owner=owner, ready_within=max(3 * resync, 5.0))
        signals.on_refused = requests.refuse
        endpoint = _serve(store, owner, namespace, signals, metrics_host, metrics_port)
        served = lane_flags.served(workers, sizes)
        recorder = Recorder(
            signals, store, owner, workers=sum(served.values()), lanes=served, resync=resync
        )
        # What exists now (modules, the tasks, the store) lives as long as the process:
        # frozen before the first claim, it is left out of every later collection. A full
        # collection of it held the GIL 16-22 ms on a 2-core box (~50,000 objects), and
        # every due job then started that much late (docs/decisions.md).
        gc.freeze()
        # Jobs that run Python code hold the GIL in turns of the switch interval: at
        # Python's 5 ms, on-time jobs started 7.5 ms late at the median (p99 23 ms) beside
        # CPU-bound jobs; at 1 ms, 4.4 (p99 9.4), for ~1 % more CPU (docs/decisions.md).
        sys.setswitchinterval(switch_interval / 1000)
        engine = Scheduler(workers, store=store, lanes=sizes, owner=owner, metrics=recorder)
        recorder.start()
        _announce(owner, namespace, store, lane_flags.shown(served, sizes), endpoint)
        forced = _until_stopped(engine, signals, requests, summary_every, shutdown_timeout)
        recorder.close()
        if summary_every:
            signals.log_summary()
        if endpoint is not None:
            endpoint.close()
        store.close()
    if forced is not None:
        sys.exit(128 + forced)  # as a process ended by that signal (130, 143)
    if requests.refused is not None:
        fail(str(requests.refused), EXIT_REFUSED)


def _until_stopped(
    engine: Scheduler,
    signals: Any,
    requests: _StopRequests,
    summary_every: float,
    shutdown_timeout: float,
) -> int | None:
    """Serve until SIGTERM/SIGINT, or until the store refuses the namespace for good
    (``Signals.on_refused``), with a summary line every ``summary_every`` seconds; then
    the clean stop (``_shut_down``: the signal that forced it, or None)."""
    while not requests.stop.wait(summary_every or None):
        signals.log_summary()
    signals.stopping()
    return _shut_down(engine, shutdown_timeout, requests)


def _trace(on: bool) -> None:
    """``--tracing``: the engine (and any client of this process) reads it at creation."""
    if on:
        from scheduler import tracing

        if tracing.api() is None:
            raise click.BadParameter(
                "needs the OpenTelemetry API (opentelemetry-api>=1.25): pip install -e "
                "'.[otel]' from a checkout (once published: duetime[otel]), and an SDK to "
                "record the spans"
            )
        os.environ[tracing.ENV] = "1"


def _announce(owner: str, namespace: str, store: Any, served: Any, endpoint: Any) -> None:
    logging.getLogger("duetime").info(
        "replica %s running namespace %r at %s with lanes %s%s",
        owner,
        namespace,
        store.url,
        served,
        "" if endpoint is None else f"; /metrics, /healthz, /readyz on {endpoint.url}",
    )


def _check_where(redis_url: str | None, embedded: bool, data_dir: str | None) -> None:
    """A replica serves the Redis it is told: --redis URL (or DUETIME_REDIS_URL), or
    --embedded, exactly one (else one line, exit 2); --data-dir only with --embedded."""
    if embedded and redis_url:
        source = click.get_current_context().get_parameter_source("redis_url")
        if source is click.core.ParameterSource.ENVIRONMENT:
            fail(
                "run: --embedded starts a throwaway local server, but DUETIME_REDIS_URL is "
                "set: unset it for a trial with --embedded, or drop --embedded to serve "
                "that Redis",
                EXIT_USAGE,
            )
        fail("run: give --redis URL or --embedded (a throwaway local server), not both", EXIT_USAGE)
    if not embedded:
        need_url("run", redis_url, "; --embedded starts a throwaway local server instead")
        if data_dir is not None:
            fail("run: --data-dir applies to --embedded only (the server's data)", EXIT_USAGE)


class _Forced(Exception):
    """A second SIGTERM/SIGINT ends the wait for running jobs."""


class _StopRequests:
    """The handler of SIGTERM and SIGINT: the first asks for the clean stop (``stop``); a
    second one, while running jobs are waited for, ends that wait (``forced``: its
    number), as Celery's, uvicorn's and Sidekiq's second Ctrl-C does."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.signalled = False  # the first SIGTERM/SIGINT came (a refusal is no signal)
        self.forced: int | None = None
        self.interruptible = False  # the main thread waits in a join that may be cut
        self.refused: BaseException | None = None  # claiming stopped for good (Signals)

    @classmethod
    def installed(cls) -> _StopRequests:
        """A new one, as the handler of SIGTERM and SIGINT."""
        requests = cls()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, requests)
        return requests

    def refuse(self, error: BaseException) -> None:
        """The store refused the namespace for good (a newer duetime's layout): the clean
        stop, as a first signal asks it (the first signal after it asks it again: an
        orchestrator's SIGTERM does not cut the wait for running jobs)."""
        self.refused = error
        self.stop.set()

    def __call__(self, signum: int, _frame: object) -> None:
        if not self.signalled:
            self.signalled = True
            self.stop.set()
            return
        self.forced = signum
        if self.interruptible:  # raised in the main thread, out of its join
            self.interruptible = False
            raise _Forced


def _shut_down(engine: Scheduler, timeout: float, requests: _StopRequests) -> int | None:
    """The clean stop (``Scheduler.shutdown``), run on its own thread so that a second
    signal can end the wait for running jobs: then their leases are handed back
    (``Scheduler.abandon``) and the signal's number is returned; None after a clean stop."""
    logging.getLogger("duetime").info(
        "replica %s shutting down (a second SIGTERM/SIGINT stops without waiting)", engine.owner
    )
    failed: list[BaseException] = []
    # held until the shutdown ends: the main thread waits by acquiring it, a wait that a
    # signal handler's exception cuts cleanly (a cut Thread.join marks the thread ended)
    shutting, ended = threading.Lock(), threading.Event()
    shutting.acquire()

    def shut_down() -> None:
        try:
            engine.shutdown(wait=True, timeout=timeout, exiting=True)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failed.append(exc)
        finally:
            ended.set()
            shutting.release()

    threading.Thread(target=shut_down, name="duetime-shutdown", daemon=True).start()
    try:
        requests.interruptible = True
        if requests.forced is None:
            shutting.acquire()
        requests.interruptible = False
    except _Forced:
        pass
    if failed:
        raise failed[0]
    if ended.is_set():
        return None
    running, handed = engine.abandon()
    logging.getLogger("duetime").warning(
        "%s again: not waiting for %d running job(s); %d lease(s) handed back: other "
        "replicas run them again",
        signal.Signals(requests.forced or signal.SIGTERM).name,
        running,
        handed,
    )
    return requests.forced


def _open_checked(url: str, namespace: str, **options: Any) -> Any:
    """The namespace's store, on a server that passed the checks (else exit 1 or 3)."""
    from scheduler.stores.redis import (
        ShardCountError,
        StoreConfigError,
        StoreUnavailableError,
        open_store,
    )

    try:
        store = open_store(url, namespace, **options)
    except ValueError as exc:  # a malformed URL or namespace
        bad_input(exc)
    from scheduler.errors import WrongServerError

    try:
        store.check_server()  # refuses eviction and old servers; warns if AOF is off
    except WrongServerError as exc:  # not the kind of server the URL says (a sentinel)
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNREACHABLE) from None
    except (StoreConfigError, ShardCountError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_REFUSED) from None
    except StoreUnavailableError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNREACHABLE) from None
    return store


def _serve(
    store: Any, owner: str, namespace: str, signals: Signals, host: str, port: int | None
) -> Any:
    """Prometheus metrics, /healthz and /readyz on ``host:port``; the metrics wrap into
    ``signals`` (namespace gauges are read from the store per scrape, by the metrics
    leader only: presence.py). None without a port."""
    if port is None:
        return None
    from scheduler.metrics import PrometheusMetrics
    from scheduler.stores.redis.claiming import presence
    from scheduler.stores.redis.reading import queries

    def figures() -> dict[str, Any] | None:
        if not presence.lead_metrics(queries.parts(store)[0], owner):
            return None  # another replica exports them
        return queries.gauges(store)  # every shard, as stats and the console read them

    try:
        metrics = PrometheusMetrics(namespace=namespace, namespace_source=figures)
    except ImportError as exc:
        fail(f"--metrics-port: {exc}", EXIT_USAGE)
    signals.inner = metrics
    try:
        return metrics.serve(port, host.strip("[]"), ready=signals.ready)  # [::1] as URLs write it
    except OSError as exc:  # the port is taken, or the address is not this host's
        fail(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}): choose another "
            "--metrics-port or --metrics-host, or stop what holds it",
            EXIT_USAGE,
        )
