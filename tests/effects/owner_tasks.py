"""The task replica processes run in test_stopped_owner_processes.py (imported by
``duetime run --import tests.effects.owner_tasks``).

``effects.pay`` reports its start (``<key>:started``: fence, pid), waits at a gate the test
opens (``<key>:gate:<fence>``, so the test can stop this process before it writes), then
writes its effect through both fenced sinks and reports what each answered
(``<key>:results``: "ok" or "stale"). The control lists live on ``$WITNESS_URL``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg
import redis

from scheduler import current_invocation, task
from workers.effects import StaleFenceError
from workers.effects.postgres import fenced_transaction, record_outcome
from workers.effects.redis import fenced_set, fenced_xadd

GATE_TIMEOUT = 120  # seconds: a bound (a test that never opens the gate fails, not hangs)


def _control() -> Any:
    return redis.Redis.from_url(os.environ["WITNESS_URL"])


def _ms(r: Any) -> int:
    """The control server's clock (ms): one clock for the test and every replica."""
    sec, usec = r.time()
    return int(sec * 1000 + usec // 1000)


def _postgres(pg: str, table: str) -> str:
    inv = current_invocation()
    try:
        with psycopg.connect(pg) as conn, fenced_transaction(conn, table=table):
            conn.execute(
                f"INSERT INTO {table}_orders VALUES (%s, %s) ON CONFLICT (inv)"
                " DO UPDATE SET fence = EXCLUDED.fence",
                (inv.invocation_id, inv.fence),
            )
            record_outcome(conn, {"fence": inv.fence}, table=table)
    except StaleFenceError:
        return "stale"
    return "ok"


def _redis(r: Any, key: str) -> str:
    fence = current_invocation().fence
    try:
        fenced_set(r, f"{key}:value", fence)
        fenced_xadd(r, f"{key}:stream", {"fence": fence})
    except StaleFenceError:
        return "stale"
    return "ok"


@task("effects.pay")
def pay(key: str, table: str, pg: str) -> None:
    inv = current_invocation()
    with _control() as r:
        r.rpush(f"{key}:started", json.dumps({"fence": inv.fence, "pid": os.getpid()}))
        if r.blpop([f"{key}:gate:{inv.fence}"], timeout=GATE_TIMEOUT) is None:
            r.rpush(f"{key}:results", json.dumps({"fence": inv.fence, "gate": "timeout"}))
            return
        passed = _ms(r)
        answers = {"postgres": _postgres(pg, table), "redis": _redis(r, key)}
        r.rpush(f"{key}:results", json.dumps({"fence": inv.fence, **answers}))
        r.rpush(f"{key}:times", json.dumps({"fence": inv.fence, "gate": passed, "done": _ms(r)}))
