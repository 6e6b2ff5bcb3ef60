"""Tasks for multi-process fault tests, and the *witness* that records what they did.

The witness is a Redis server (``$WITNESS_URL``) that faults never touch, holding keys
under ``$WITNESS_KEY``:

    execs    HINCRBY <key>:execs <inv> 1       executions (starts) per invocation
    log      RPUSH   <key>:log   json(job, sched, attempt, fence, pid, start_ms)
    done     HINCRBY <key>:done  <inv> 1       effects finished per invocation
    fence    HSET    <key>:fence <inv> <fence> highest fencing token accepted
    writes   HINCRBY <key>:writes <inv> 1      fenced writes accepted
    rejects  HINCRBY <key>:rejects <inv> 1     fenced writes refused (a stale token)

The fenced resource is one Lua script (``FENCED_WRITE``): a write whose token is lower
than the highest seen for its invocation is refused and counted, which is what a real
resource that honours ``current_invocation().fence`` would do.
"""

from __future__ import annotations

import json
import os
from typing import Any

import redis

from scheduler import current_invocation, task

FENCED_WRITE = """
local hi = redis.call('HGET', KEYS[1], ARGV[1])
if hi and tonumber(ARGV[2]) < tonumber(hi) then
  redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return 1
"""

_client: redis.Redis | None = None


def _witness() -> tuple[redis.Redis, str]:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["WITNESS_URL"])
    return _client, os.environ["WITNESS_KEY"]


def _record() -> None:
    inv = current_invocation()
    r, key = _witness()
    sec, usec = r.time()  # the witness server's clock: immune to a replica's skewed one
    entry = json.dumps(
        {
            "job": inv.job_id,
            "sched": inv.scheduled_ms,
            "attempt": inv.attempt,
            "fence": inv.fence,
            "pid": os.getpid(),
            "start_ms": sec * 1000 + usec // 1000,
        }
    )
    with r.pipeline(transaction=False) as p:
        p.hincrby(f"{key}:execs", inv.invocation_id, 1)
        p.rpush(f"{key}:log", entry)
        p.execute()


def fenced_write(r: redis.Redis, key: str, inv: str, fence: int) -> bool:
    """Write to the fenced resource; False when refused as stale."""
    return bool(
        r.eval(FENCED_WRITE, 3, f"{key}:fence", f"{key}:writes", f"{key}:rejects", inv, fence)
    )


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


@task("witness.work")
def work(seconds: float = 0.0) -> None:
    """Record the start, work ``seconds`` (cooperatively cancellable), then write the
    effect to the fenced resource with this attempt's token."""
    _record()
    inv = current_invocation()
    if seconds > 0:
        inv.token.wait(seconds)
    r, key = _witness()
    fenced_write(r, key, inv.invocation_id, inv.fence)
    r.hincrby(f"{key}:done", inv.invocation_id, 1)


@task("witness.padded")
def padded(pad: str = "") -> None:
    """A job whose only purpose is its size (F10 fills Redis with them, due in an hour);
    run, it records its start like every witness task."""
    _record()


class Witness:
    """The test side: reads what the tasks recorded under ``key``."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.r = redis.Redis.from_url(url)

    def log(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange(f"{self.key}:log", 0, -1)]

    def count(self, what: str) -> dict[str, int]:
        """``execs``, ``done``, ``writes`` or ``rejects`` per invocation."""
        return {k.decode(): int(v) for k, v in self.r.hgetall(f"{self.key}:{what}").items()}

    def total(self, what: str) -> int:
        return sum(self.count(what).values())

    def close(self) -> None:
        self.r.close()


def witness_log(client: redis.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in client.lrange(f"{key}:log", 0, -1)]
