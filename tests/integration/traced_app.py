"""A traced producer and a traced task, for tests/integration/test_tracing_replicas.py.

Imported in a process with ``$TRACE_DIR`` set, it configures an OpenTelemetry SDK
provider whose spans are written, as each ends, to ``$TRACE_DIR/spans-<pid>.jsonl`` (one
JSON object per line: ``JsonLinesExporter``), so a test can read what every process
exported, including one that was stopped and continued.

    python -m tests.integration.traced_app produce URL NAMESPACE   # prints the job id

The task ``traced.hold`` tells the test it started (RPUSH ``<ns>:started`` on the store's
Redis: pid and attempt); attempt 1 then waits until its invocation is cancelled (its lease
lost, found at renewal), later attempts return at once.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from scheduler import Client, current_invocation, task


class JsonLinesExporter(SpanExporter):
    """Each span as one JSON line, appended and flushed as it is exported."""

    def __init__(self, path: pathlib.Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for s in spans:
            self._file.write(json.dumps(span_json(s)) + "\n")
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()


def span_json(s: ReadableSpan) -> dict[str, Any]:
    ctx = s.get_span_context()
    assert ctx is not None
    return {
        "name": s.name,
        "kind": s.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent": None if s.parent is None else f"{s.parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in s.links],
        "attributes": dict(s.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in s.events],
        "status": s.status.status_code.name,
        "pid": os.getpid(),
    }


def read_spans(directory: pathlib.Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("spans-*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _setup() -> None:
    where = os.environ.get("TRACE_DIR")
    if not where:
        return
    provider = TracerProvider()
    exporter = JsonLinesExporter(pathlib.Path(where) / f"spans-{os.getpid()}.jsonl")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


_setup()
_redis: redis.Redis | None = None


@task("traced.hold")
def hold(started: str) -> int:
    global _redis
    inv = current_invocation()
    if _redis is None:
        _redis = redis.Redis.from_url(os.environ["TRACED_REDIS"])
    _redis.rpush(started, json.dumps({"pid": os.getpid(), "attempt": inv.attempt}))
    if inv.attempt == 1:
        inv.token.wait(60)  # until its lease is found lost (or 60 s: the test fails)
    return inv.attempt


def produce(url: str, namespace: str) -> str:
    """Enqueue ``traced.hold`` inside a span of this process, as a web request would."""
    with (
        Client(url, namespace=namespace, tracing=True) as client,
        trace.get_tracer("app").start_as_current_span("POST /orders"),
    ):
        return client.enqueue("traced.hold", kwargs={"started": f"{namespace}:started"}, delay=0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["produce"]:
        print(produce(sys.argv[2], sys.argv[3]))
        trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]
