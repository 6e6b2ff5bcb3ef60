"""Tasks for multi-process tests. Each execution is recorded in a *witness* place that
the replicas do not manage: a Redis hash/list named by $WITNESS_KEY at $WITNESS_URL.

    execs  HINCRBY <key>:execs <invocation id> 1        (executions per invocation)
    log    RPUSH   <key>:log   json(job, sched, attempt, fence, pid, start_ms)
"""
from __future__ import annotations

import json
import os

import redis

from scheduler import current_invocation, task

_client: redis.Redis | None = None


def _witness() -> tuple[redis.Redis, str]:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["WITNESS_URL"])
    return _client, os.environ["WITNESS_KEY"]


def _record() -> None:
    inv = current_invocation()
    r, key = _witness()
    sec, usec = r.time()   # the witness server's clock: immune to a replica's skewed one
    entry = json.dumps({"job": inv.job_id, "sched": inv.scheduled_ms, "attempt": inv.attempt,
                        "fence": inv.fence, "pid": os.getpid(),
                        "start_ms": sec * 1000 + usec // 1000})
    with r.pipeline(transaction=False) as p:
        p.hincrby(f"{key}:execs", inv.invocation_id, 1)
        p.rpush(f"{key}:log", entry)
        p.execute()


@task("witness.hit")
def hit() -> None:
    _record()


@task("witness.slow")
def slow(seconds: float) -> None:
    """Record the start, then work for ``seconds`` (stopping early if told to)."""
    _record()
    current_invocation().token.wait(seconds)
    r, key = _witness()
    r.hincrby(f"{key}:done", current_invocation().invocation_id, 1)
