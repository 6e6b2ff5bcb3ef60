"""Metrics: what a replica reports, and the Prometheus exporter (optional extra).

    pip install -e '.[metrics]'         # prometheus-client; once published: duetime[metrics]
    duetime run ... --metrics-port 9100 [--metrics-host 0.0.0.0]

Every series carries a ``namespace`` label. Per replica: dispatch lag (claim time minus
scheduled time, in the store's clock, so replica clock skew does not distort it), claims,
finished invocations by outcome, run duration per task, lease renewals and losses, and
the standard process, platform and GC collectors of prometheus-client. Per namespace
(read from the store at scrape time, by one replica only, the *metrics leader*, so that
they are not multiplied by the number of replicas; see ``namespace_source``): queue depth
per lane, running invocations, live replicas, quarantined entries, the store's
counter of every event kind (skipped occurrences, retries, dead letters, data-loss
alarms, ...), and per declared limit what waits on it (``duetime_limit_*{scope}``;
docs/flow-control.md). In process, pass ``namespace_source=lambda: {"limits":
limit_usage.figures(store.limit_usage())}`` for the limits' gauges.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

log = logging.getLogger("duetime.metrics")

LAG_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
RUN_BUCKETS = (
    0.001,
    0.005,
    0.025,
    0.1,
    0.5,
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)


class Run(NamedTuple):
    """One successful invocation, as ``Metrics.succeeded_many`` reports it."""

    lane: str
    task: str  # the registered task name, or ``callable`` (an in-process callable)
    seconds: float  # how long its call took
    waited: float  # how long it waited for its worker since the claim


class Metrics:
    """The hooks an engine calls. This base class records nothing (the default)."""

    def claimed(self, lane: str, lag: float) -> None:
        """An invocation was claimed ``lag`` seconds after its scheduled time."""

    def claimed_many(self, lags: Sequence[tuple[str, float]]) -> None:
        """``claimed(lane, lag)`` for each of a batch's claims (one call per batch)."""
        if type(self).claimed is Metrics.claimed:
            return  # nothing would record them
        for lane, lag in lags:
            self.claimed(lane, lag)

    def finished(self, lane: str, outcome: str) -> None:
        """outcome: succeeded | failed | retried | timeout | interrupted | lease_lost |
        unknown_task | late (a claim its limit key's rate counted, handed back unstarted
        because it could not start in time: docs/flow-control.md#limits)."""

    def ran(self, lane: str, task: str, outcome: str, seconds: float, waited: float) -> None:
        """An invocation's call took ``seconds`` after waiting ``waited`` seconds for its
        worker since the claim. ``task``: the registered task name, or ``callable`` (an
        in-process callable); outcome: succeeded | failed | retried | timeout | interrupted."""

    def succeeded_many(self, runs: Sequence[Run]) -> None:
        """``finished(lane, "succeeded")`` and ``ran(lane, task, "succeeded", seconds,
        waited)`` for each of a batch of successes (one call per batch of batched acks:
        an engine reports its successes when their acknowledgements are flushed)."""
        kind = type(self)
        if kind.finished is Metrics.finished and kind.ran is Metrics.ran:
            return  # nothing would record them
        for lane, task, seconds, waited in runs:
            self.finished(lane, "succeeded")
            self.ran(lane, task, "succeeded", seconds, waited)

    def renewed(self, count: int) -> None:
        """``count`` leases were renewed in one heartbeat."""

    def lease_lost(self, count: int) -> None:
        """``count`` running invocations lost their lease."""

    def claim_round(self, error: BaseException | None) -> None:
        """A claim round reached the store (``None``) or failed with ``error``."""

    def loop_lag(self, lane: str, seconds: float) -> None:
        """An ``async def`` job ended; its code kept its event loop from running any
        callback for up to ``seconds`` at a time (blocking code between two awaits:
        workers/coroutines.py)."""

    def loop_lag_many(self, lags: Sequence[tuple[str, float]]) -> None:
        """``loop_lag(lane, seconds)`` for each of a batch of ``async def`` jobs (one call
        per batch: an engine with batched acks reports its async successes' loop lags
        when their acknowledgements are flushed, a failure's at once)."""
        if type(self).loop_lag is Metrics.loop_lag:
            return  # nothing would record them
        for lane, seconds in lags:
            self.loop_lag(lane, seconds)


# The namespace-wide figures a source returns (stores/redis/reading/queries.py reads them).
NamespaceFigures = Mapping[str, Any]


class PrometheusMetrics(Metrics):
    """Prometheus series for one replica of ``namespace``.

    ``namespace_source`` (optional) is called on each scrape for the namespace-wide
    gauges; it returns their figures, or ``None`` when this replica is not the one that
    exports them (the CLI's source asks the store whether this replica holds the
    ``metrics-leader`` key). ``registry``: a new one by default, with the process,
    platform and GC collectors registered on it."""

    def __init__(
        self,
        *,
        namespace: str = "default",
        registry: Any = None,
        namespace_source: Callable[[], NamespaceFigures | None] | None = None,
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "metrics need prometheus-client: pip install 'prometheus-client>=0.20' "
                "(duetime's metrics extra)"
            ) from exc
        self._prom = prom
        self.namespace = namespace
        if registry is None:
            registry = prom.CollectorRegistry()
            prom.ProcessCollector(registry=registry)
            prom.PlatformCollector(registry=registry)
            prom.GCCollector(registry=registry)
        self.registry = r = registry
        ns = ["namespace"]
        self._lag = prom.Histogram(
            "duetime_dispatch_lag_seconds",
            "Claim time minus scheduled time, in the store's clock",
            [*ns, "lane"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self._claims = prom.Counter(
            "duetime_claims_total", "Invocations claimed here", [*ns, "lane"], registry=r
        )
        self._runs = prom.Counter(
            "duetime_runs_total",
            "Invocations finished here, by outcome",
            [*ns, "lane", "outcome"],
            registry=r,
        )
        self._durations = prom.Histogram(
            "duetime_run_duration_seconds",
            "How long an invocation's call took here, per task ('callable': in-process)",
            [*ns, "task", "outcome"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self._renewals = prom.Counter(
            "duetime_lease_renewals_total", "Leases renewed", ns, registry=r
        ).labels(namespace)
        self._losses = prom.Counter(
            "duetime_lease_losses_total",
            "Running invocations that lost their lease (a refused renewal of a claim still "
            "held, or a refused commit)",
            ns,
            registry=r,
        ).labels(namespace)
        self._loop_lag = prom.Histogram(
            "duetime_loop_lag_seconds",
            "How long an async job's code kept its event loop from running callbacks "
            "(blocking code inside an async def cannot be pre-empted)",
            [*ns, "lane"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self._children: dict[tuple[Any, ...], Any] = {}  # labels() is a lock and a dict
        if namespace_source is not None:
            r.register(_NamespaceCollector(namespace, namespace_source))

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(self.namespace, *labels)
        return child

    def claimed(self, lane: str, lag: float) -> None:
        self._child(self._claims, lane).inc()
        self._child(self._lag, lane).observe(max(0.0, lag))

    def finished(self, lane: str, outcome: str) -> None:
        self._child(self._runs, lane, outcome).inc()

    def ran(self, lane: str, task: str, outcome: str, seconds: float, waited: float) -> None:
        self._child(self._durations, task, outcome).observe(max(0.0, seconds))

    def loop_lag(self, lane: str, seconds: float) -> None:
        self._child(self._loop_lag, lane).observe(max(0.0, seconds))

    def loop_lag_many(self, lags: Sequence[tuple[str, float]]) -> None:
        child = self._child
        for lane, seconds in lags:
            child(self._loop_lag, lane).observe(seconds if seconds > 0.0 else 0.0)

    def renewed(self, count: int) -> None:
        self._renewals.inc(count)

    def lease_lost(self, count: int) -> None:
        self._losses.inc(count)

    def serve(
        self,
        port: int,
        addr: str = "127.0.0.1",
        ready: Callable[[], tuple[bool, str]] | None = None,
    ) -> Any:
        """Serve /metrics, /healthz and /readyz on ``addr:port`` (a daemon thread);
        returns the ``scheduler.endpoint.Endpoint`` (``close()`` stops it)."""
        from scheduler.endpoint import Endpoint

        return Endpoint(addr, port, registry=self.registry, ready=ready).start()


class _NamespaceCollector:
    """Reads namespace-wide figures from the store at scrape time (when the source
    returns them: on the metrics leader only). A store that cannot be read, or not within
    ``deadline`` seconds, leaves them out of this scrape; the replica's own series are
    still served (a Redis that hung made a scrape take 15 s, past Prometheus's 10 s
    scrape timeout: the whole scrape was lost). A read still under way when the next
    scrape comes is not started again."""

    deadline = 2.0

    def __init__(self, namespace: str, source: Callable[[], NamespaceFigures | None]) -> None:
        self._namespace = namespace
        self._source = source
        self._pending: concurrent.futures.Future[NamespaceFigures | None] | None = None

    def _read(self) -> NamespaceFigures | None:
        if self._pending is None or self._pending.done():
            future: concurrent.futures.Future[NamespaceFigures | None] = concurrent.futures.Future()

            def read() -> None:  # a daemon thread: a hung read never holds the exit
                try:
                    future.set_result(self._source())
                except Exception as exc:  # noqa: BLE001 - raised again by result()
                    future.set_exception(exc)

            self._pending = future
            threading.Thread(target=read, name="duetime-metrics-read", daemon=True).start()
        try:
            return self._pending.result(timeout=self.deadline)
        except concurrent.futures.TimeoutError:
            log.warning(
                "reading the namespace's figures for /metrics took over %gs: left out of "
                "this scrape",
                self.deadline,
            )
            return None

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        ns = self._namespace
        try:
            data = self._read()
        except Exception as exc:  # Redis down or refusing: no namespace figures this time
            log.warning("reading the namespace's figures for /metrics failed: %s", exc)
            data = None
        leader = GaugeMetricFamily(
            "duetime_metrics_leader",
            "1 on the replica that exports the namespace-wide gauges, else 0",
            labels=["namespace"],
        )
        leader.add_metric([ns], 0 if data is None else 1)
        yield leader
        if data is None:
            return

        def gauge(name: str, doc: str, key: str) -> Any:
            family = GaugeMetricFamily(name, doc, labels=["namespace"])
            family.add_metric([ns], data.get(key, 0))
            return family

        depth = GaugeMetricFamily(
            "duetime_queue_depth", "Pending invocations per lane", labels=["namespace", "lane"]
        )
        for lane, n in data.get("queue_depth", {}).items():
            depth.add_metric([ns, lane], n)
        yield depth
        waiting = GaugeMetricFamily(
            "duetime_waiting_for_task",
            "Due invocations that wait because no live replica serves their task",
            labels=["namespace", "task"],
        )
        for task, n in data.get("waiting", {}).items():
            waiting.add_metric([ns, task], n)
        yield waiting
        yield from _limit_families(ns, data.get("limits") or {})
        yield gauge("duetime_running", "Invocations running in the namespace", "running")
        yield gauge("duetime_replicas_alive", "Replicas with a live heartbeat key", "replicas")
        yield gauge(
            "duetime_quarantined",
            "Entries moved aside because their data did not parse (duetime quarantine ls)",
            "quarantined",
        )
        events = CounterMetricFamily(
            "duetime_events",
            "State changes recorded by the store",
            labels=["namespace", "kind"],
        )
        counts = data.get("events")
        if counts is not None:  # a data loss is exported from 0, so that increase() sees its
            counts = {"data_loss": 0, **counts}  # first alarm (a new series did not)
        for kind, n in (counts or {}).items():
            events.add_metric([ns, kind], n)
        yield events


#: The gauges of each declared limit (``scheduler/limit_usage.py``'s ``figures``): name,
#: help, figure. Labelled by scope (a declared key, ``<prefix>:*`` or ``*``), never by key.
LIMIT_GAUGES = (
    (
        "duetime_limit_running",
        "Invocations running of the keys a declared limit governs (with due or running work)",
        "running",
    ),
    (
        "duetime_limit_window_starts",
        "Starts within the rate's window of the keys a declared limit governs",
        "window_starts",
    ),
    (
        "duetime_limit_waiting_jobs",
        "Due invocations not yet claimed of the keys a declared limit governs",
        "waiting",
    ),
    (
        "duetime_limit_held_jobs",
        "Of those, the ones whose key's limit is full: their wait is the limit's",
        "held",
    ),
    ("duetime_limit_full_keys", "Keys at their limit now (with due or running work)", "full_keys"),
    (
        "duetime_limit_oldest_wait_seconds",
        "How long the oldest due invocation of the scope's keys has waited (0: none waits)",
        "oldest_wait",
    ),
)


def _limit_families(ns: str, limits: Mapping[str, Mapping[str, float]]) -> Iterable[Any]:
    from prometheus_client.core import GaugeMetricFamily

    for name, doc, figure in LIMIT_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=["namespace", "scope"])
        for scope, figures in sorted(limits.items()):
            family.add_metric([ns, scope], figures.get(figure, 0))
        yield family
