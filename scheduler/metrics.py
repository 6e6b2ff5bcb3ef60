"""Metrics: what a replica reports, and the Prometheus exporter (optional extra).

    pip install 'duetime[metrics]'      # prometheus-client
    duetime run ... --metrics-port 9100

Per replica: dispatch lag (claim time minus scheduled time, in the store's clock, so
replica clock skew does not distort it), claims, finished invocations by outcome, lease
renewals and losses. Per namespace (read from the store on each scrape): queue depth per
lane, running invocations, live replicas, and the store's counter of every event kind
(skipped occurrences, retries, dead letters, data-loss alarms, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

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


class Metrics:
    """The hooks an engine calls. This base class records nothing (the default)."""

    def claimed(self, lane: str, lag: float) -> None:
        """An invocation was claimed ``lag`` seconds after its scheduled time."""

    def finished(self, lane: str, outcome: str) -> None:
        """outcome: succeeded | failed | retried | timeout | lease_lost | unknown_task."""

    def ran(self, lane: str, task: str, outcome: str, seconds: float, waited: float) -> None:
        """An invocation's call took ``seconds`` after waiting ``waited`` seconds for its
        worker since the claim. ``task``: the registered task name, or ``callable`` (an
        in-process callable); outcome: succeeded | failed | retried | timeout."""

    def renewed(self, count: int) -> None:
        """``count`` leases were renewed in one heartbeat."""

    def lease_lost(self, count: int) -> None:
        """``count`` running invocations lost their lease."""

    def claim_round(self, error: BaseException | None) -> None:
        """A claim round reached the store (``None``) or failed with ``error``."""


class PrometheusMetrics(Metrics):
    """Prometheus series for one replica; ``namespace_source`` (optional) is read on each
    scrape for namespace-wide gauges (see ``scheduler.stores.redis.queries``)."""

    def __init__(
        self,
        *,
        registry: Any = None,
        namespace_source: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "metrics need prometheus-client: pip install 'duetime[metrics]'"
            ) from exc
        self._prom = prom
        self.registry = registry if registry is not None else prom.CollectorRegistry()
        r = self.registry
        self._lag = prom.Histogram(
            "duetime_dispatch_lag_seconds",
            "Claim time minus scheduled time, in the store's clock",
            ["lane"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self._claims = prom.Counter(
            "duetime_claims_total", "Invocations claimed here", ["lane"], registry=r
        )
        self._runs = prom.Counter(
            "duetime_runs_total",
            "Invocations finished here, by outcome",
            ["lane", "outcome"],
            registry=r,
        )
        self._renewals = prom.Counter("duetime_lease_renewals_total", "Leases renewed", registry=r)
        self._losses = prom.Counter(
            "duetime_lease_losses_total", "Running invocations that lost their lease", registry=r
        )
        if namespace_source is not None:
            r.register(_NamespaceCollector(prom, namespace_source))

    def claimed(self, lane: str, lag: float) -> None:
        self._claims.labels(lane).inc()
        self._lag.labels(lane).observe(max(0.0, lag))

    def finished(self, lane: str, outcome: str) -> None:
        self._runs.labels(lane, outcome).inc()

    def renewed(self, count: int) -> None:
        self._renewals.inc(count)

    def lease_lost(self, count: int) -> None:
        self._losses.inc(count)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose /metrics on ``port`` (a daemon thread)."""
        self._prom.start_http_server(port, addr=addr, registry=self.registry)


class _NamespaceCollector:
    """Reads namespace-wide figures from the store at scrape time."""

    def __init__(self, prom: Any, source: Callable[[], Mapping[str, Any]]) -> None:
        self._prom = prom
        self._source = source

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        data = self._source()
        depth = GaugeMetricFamily(
            "duetime_queue_depth", "Pending invocations per lane", labels=["lane"]
        )
        for lane, n in data.get("queue_depth", {}).items():
            depth.add_metric([lane], n)
        yield depth
        yield GaugeMetricFamily(
            "duetime_running", "Invocations running in the namespace", value=data.get("running", 0)
        )
        yield GaugeMetricFamily(
            "duetime_replicas_alive",
            "Replicas with a live heartbeat key",
            value=data.get("replicas", 0),
        )
        yield GaugeMetricFamily(
            "duetime_quarantined",
            "Entries moved aside because their data did not parse (duetime quarantine ls)",
            value=data.get("quarantined", 0),
        )
        events = CounterMetricFamily(
            "duetime_events", "State changes recorded by the store", labels=["kind"]
        )
        for kind, n in data.get("events", {}).items():
            events.add_metric([kind], n)
        yield events
