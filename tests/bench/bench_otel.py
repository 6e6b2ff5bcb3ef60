"""A replica's OpenTelemetry SDK for the fleet benchmarks (not a test): ``BENCH_OTEL`` set
in a replica's environment (with ``DUETIME_TRACING=1``) makes the benchmarks' replica
wrapper (``_common.WRAPPER``) call ``install`` before ``duetime run`` starts: a
``TracerProvider`` recording through a ``BatchSpanProcessor`` (batches of 512, a queue
of 20,000: a burst drops nothing) to an exporter that drops what it is given, as
``bench_span_cost.py`` measures a run. ``BENCH_OTEL``: ``all`` (every run recorded, the
default parent-based sampler) or ``ratio`` (``ParentBased(TraceIdRatioBased(0.1))``).
The export thread's CPU counts among the replica's ``others``.

    PYTHONPATH=$PWD python tests/bench/probe_cpu.py --mode shared --replicas 3 \\
        --log-level default --runs 5 \\
        --compare off=.,sdk=.+DUETIME_TRACING=1+BENCH_OTEL=all
"""

from __future__ import annotations

from bench_span_cost import Dropping, sampler_of


def install(mode: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(sampler=sampler_of("always" if mode == "all" else mode))
    provider.add_span_processor(BatchSpanProcessor(Dropping(), max_queue_size=20_000))
    trace.set_tracer_provider(provider)
