"""CPU per run of duetime's tracing code path, with the OpenTelemetry SDK recording every
run through a ``BatchSpanProcessor`` to an exporter that drops what it is given, against
tracing off (docs/tracing.md, "The cost"). Not a test.

    PYTHONPATH=. python tests/bench/bench_span_cost.py                  # every run recorded
    PYTHONPATH=. python tests/bench/bench_span_cost.py --sampler ratio  # 10 % sampled

What one run of a job costs the runner (workers/runner.py) is driven here without a job,
a store or a thread: per run, ``OpenSpans.start`` (the span started, current, its cancel
hook), ``OpenSpans.finished`` (the job returned) and ``OpenSpans.ended`` (its outcome
recorded), as the runner calls them. ``off`` is the runner's own tests with no tracer.
The ``sdk ...`` rows are references built with the SDK's public API alone (no duetime
code): a bare span, a span with duetime's attributes set after its start or given at it,
a span built at the run's end (``start_time``/``end_time``), the context's attach and
detach, the SDK with no processor (its default parent-based sampler, or ``ALWAYS_ON``), and
a span the sampler drops. CPU is the process's (``time.process_time_ns``,
every thread: the batch processor's export thread included); each figure is the median
of ``--repeat`` samples of ``--runs`` runs, the variants interleaved sample by sample.
Run it on two checkouts (``PYTHONPATH=<tree>``) to compare a change.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased

from scheduler.model import After, Claim, Commit, Every, JobSpec, TaskRef, TraceContext
from scheduler.spans import InvocationTracer
from workers.context import CancelToken
from workers.traced import OpenSpans

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Dropping(SpanExporter):
    """Drops what it is given; counts it (every span recorded must reach it)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def sampler_of(name: str) -> Any:
    return {"always": ParentBased(ALWAYS_ON), "ratio": ParentBased(TraceIdRatioBased(0.1))}[name]


def claims(shape: str, n: int) -> list[Claim]:
    """``n`` claims of one shape: a one-off enqueued in a trace (its runs are children),
    a recurring job's (roots with a link), or a one-off enqueued outside any trace."""
    trace_ctx = None if shape == "untraced" else TraceContext(PARENT)
    schedule = Every(60.0) if shape == "recurring" else After(0.0)
    out = []
    for i in range(n):
        spec = JobSpec(f"job-{i}", TaskRef("bench.noop"), schedule, trace=trace_ctx)
        out.append(Claim(f"job-{i}", 1000.0 + i, 1, f"r1:{i}", i + 1, 1030.0, spec, 1, "default"))
    return out


def duetime_path(tracer: InvocationTracer, batch: list[Claim]) -> Callable[[], None]:
    """The runner's calls for each run: start, the job's return, its recorded outcome."""
    ok = (Commit.OK,)

    def run() -> None:
        spans = OpenSpans()
        for claim in batch:
            token = CancelToken()
            span = spans.start(tracer, claim, token)
            if span is not None:
                spans.finished(span, None, token.reason)
            if spans:
                spans.ended((claim,), ok)

    return run


def off_path(batch: list[Claim]) -> Callable[[], None]:
    """The runner with no tracer: its ``is None`` test and ``if spans:`` tests."""
    tracer = None

    def run() -> None:
        spans = OpenSpans()
        for claim in batch:
            token = CancelToken()
            span = None if tracer is None else spans.start(tracer, claim, token)
            if span is not None:
                pass
            if spans:
                spans.ended((claim,), None)

    return run


def attributes(claim: Claim) -> dict[str, Any]:
    return {
        "duetime.job.id": claim.job_id,
        "duetime.job.task": "bench.noop",
        "duetime.invocation.scheduled_ms": claim.scheduled_ms,
        "duetime.invocation.lag_s": 0.001234,
        "duetime.invocation.attempt": claim.attempt,
        "duetime.invocation.fence": claim.fence,
        "duetime.invocation.lane": claim.lane,
        "duetime.replica.id": "host-1234-abcdef",
    }


def sdk_paths(provider: TracerProvider, batch: list[Claim]) -> dict[str, Callable[[], None]]:
    """References built with the SDK's public API only (no duetime code)."""
    tracer = provider.get_tracer("bench")
    bare_tracer = TracerProvider(sampler=provider.sampler).get_tracer("bench")  # no processor
    always_on = TracerProvider(sampler=ALWAYS_ON).get_tracer("bench")  # not parent-based
    dropped = TracerProvider(sampler=ALWAYS_OFF).get_tracer("bench")  # every span unsampled
    kind, root = trace.SpanKind.CONSUMER, context.Context()
    attrs = [attributes(c) for c in batch]

    def bare() -> None:
        for _ in batch:
            tracer.start_span("duetime run bench.noop", root, kind).end()

    def no_processor() -> None:
        for _ in batch:
            bare_tracer.start_span("duetime run bench.noop", root, kind).end()

    def not_parent_based() -> None:
        for _ in batch:
            always_on.start_span("duetime run bench.noop", root, kind).end()

    def unsampled() -> None:
        for _ in batch:
            dropped.start_span("duetime run bench.noop", root, kind).end()

    def set_after() -> None:
        for a in attrs:
            span = tracer.start_span("duetime run bench.noop", root, kind)
            span.set_attributes(a)
            span.set_attribute("duetime.invocation.outcome", "succeeded")
            span.end()

    def given_at_start() -> None:
        for a in attrs:
            span = tracer.start_span("duetime run bench.noop", root, kind, attributes=a)
            span.set_attribute("duetime.invocation.outcome", "succeeded")
            span.end()

    def built_at_end() -> None:  # the run's start kept; the span made at its recorded end
        for a in attrs:
            started = time.time_ns()
            done = {**a, "duetime.invocation.outcome": "succeeded"}
            span = tracer.start_span(
                "duetime run bench.noop", root, kind, attributes=done, start_time=started
            )
            span.end(end_time=time.time_ns())

    def attach_detach() -> None:
        span = tracer.start_span("held", root, kind)
        for _ in batch:
            token = context.attach(trace.set_span_in_context(span, root))
            context.detach(token)
        span.end()

    return {
        "sdk bare span (start, end)": bare,
        "sdk bare span, no processor": no_processor,
        "sdk bare span, no processor, ALWAYS_ON": not_parent_based,
        "sdk unsampled span (ALWAYS_OFF)": unsampled,
        "sdk span, attributes set after start": set_after,
        "sdk span, attributes given at start": given_at_start,
        "sdk span built at the run's end": built_at_end,
        "context attach + detach": attach_detach,
    }


def sample(fn: Callable[[], None], runs: int) -> float:
    """CPU ns per run of one call of ``fn`` (``runs`` runs)."""
    t = time.process_time_ns()
    fn()
    return (time.process_time_ns() - t) / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20_000, help="runs per sample")
    ap.add_argument("--repeat", type=int, default=9, help="samples per variant (median)")
    ap.add_argument("--sampler", choices=["always", "ratio"], default="always")
    ap.add_argument("--no-sdk-rows", action="store_true", help="only off and duetime's rows")
    args = ap.parse_args()

    exporter = Dropping()
    provider = TracerProvider(sampler=sampler_of(args.sampler))
    # batches of 512 (the default), and a queue that holds a sample: a busy box starves the
    # export thread, and a full queue drops spans (cheaper runs: not what is measured here)
    processor = BatchSpanProcessor(exporter, max_queue_size=args.runs + 2048)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    tracer = InvocationTracer("host-1234-abcdef", time.time)

    shapes = ("oneoff", "recurring", "untraced")
    batches = {s: claims(s, args.runs) for s in shapes}
    variants: dict[str, Callable[[], None]] = {"off (no tracer)": off_path(batches["oneoff"])}
    for s in shapes:
        variants[f"duetime, {s}"] = duetime_path(tracer, batches[s])
    if not args.no_sdk_rows:
        variants.update(sdk_paths(provider, batches["untraced"]))

    for fn in variants.values():  # warm: caches, the SDK's lazy parts
        fn()
    figures: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeat):
        for name, fn in variants.items():
            gc.collect()
            figures[name].append(sample(fn, args.runs))
    processor.force_flush()

    off = statistics.median(figures["off (no tracer)"])
    print(
        f"# {args.runs} runs x {args.repeat} samples, sampler {args.sampler}, BatchSpanProcessor"
        f" -> dropping exporter; python {platform.python_version()},"
        f" opentelemetry-sdk {_sdk_version()}"
    )
    print(f"{'variant':40} {'us/run':>8} {'[min-max]':>15} {'- off':>8}")
    for name, xs in figures.items():
        med = statistics.median(xs)
        print(
            f"{name:40} {med / 1000:8.2f} [{min(xs) / 1000:5.2f}-{max(xs) / 1000:5.2f}]"
            f" {(med - off) / 1000:8.2f}"
        )
    print(f"# spans exported (and dropped): {exporter.spans}", file=sys.stderr)


def _sdk_version() -> str:
    from importlib.metadata import version

    return version("opentelemetry-sdk")


if __name__ == "__main__":
    main()
