#!/usr/bin/env python3
"""``duetime ls --state``: the time of a page, and what its indexes weigh.

Not part of the test run. Typical use (a private redis-server, AOF off, with
``hash-max-listpack-value 128`` as deploy/redis.conf sets it):

    PYTHONPATH=$PWD python tests/bench/bench_listing.py --pending 1000000

1. Memory: ``INFO memory`` ``used_memory`` before and after loading N pending one-off jobs
   (~90-byte definitions, due in 1-2 h, one lane; the event stream is filled before the
   baseline so it is not counted per job), divided by N. No listing index holds pending
   jobs (they are listed from the due sets they are in anyway), so this is the store's
   cost per pending job with the indexes in place; ``MEMORY USAGE`` of the indexes is
   printed too.
2. Then F finished jobs (half succeeded, half failed and dead-lettered, through the real
   claim / complete / fail scripts), P paused and R running ones are added.
3. Page time: ``listing.list_jobs`` (what ``duetime ls --state S`` and
   ``Client.list_jobs`` call), pages of 50 followed by cursor, K pages per state (the
   scheduled pages start at the head and at K random points of the due set), client
   round trips included (redis-py + hiredis over loopback); p50 / p99 / max in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.reading import listing  # noqa: E402


def spec(i: int, delay: float) -> JobSpec:
    """A job like bench_scale.py's memory rows: a short id, a 13-digit number and a tag in
    its arguments, a whole-second delay: a definition of 90 bytes of JSON."""
    args = json.dumps({"due_ms": 1_764_000_000_000 + i, "tag": "monthly"}, separators=(",", ":"))
    return JobSpec(job_id=f"j{i}", target=TaskRef("bench.noop", args), schedule=After(delay))


def used(rs: RedisStore) -> int:
    return int(rs.redis.info("memory")["used_memory"])


def load(rs: RedisStore, first: int, n: int, delay: tuple[int, int], batch: int = 2000) -> None:
    rng = random.Random(first)
    for start in range(first, first + n, batch):
        rs.add_many(
            [spec(i, rng.randint(*delay)) for i in range(start, min(first + n, start + batch))]
        )


def finish(rs: RedisStore, first: int, n: int) -> None:
    """n jobs due now, claimed, half completed and half failed for good."""
    load(rs, first, n, (0, 0))
    done = 0
    while done < n:
        claims = rs.claim_due({"default": 500}, 60.0, "bench").claims
        if not claims:
            break
        for c in claims:
            if int(c.job_id[1:]) % 2:
                rs.fail(c, "boom", None)
            else:
                rs.complete(c, None)
        done += len(claims)


def pages(rs: RedisStore, state: str, k: int, starts: list[str | None]) -> list[float]:
    times = []
    for cursor in starts:
        for _ in range(max(1, k // len(starts))):
            t0 = time.perf_counter()
            page = listing.list_jobs(rs, state, limit=50, cursor=cursor)
            times.append((time.perf_counter() - t0) * 1000)
            cursor = page.cursor
            if cursor is None:
                break
    return times


def summary(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return {
        "pages": len(times),
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(times[-1], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--finished", type=int, default=20_000)
    ap.add_argument("--paused", type=int, default=1_000)
    ap.add_argument("--running", type=int, default=200)
    ap.add_argument("--pages", type=int, default=200)
    a = ap.parse_args()
    with EmbeddedRedis(appendonly=False) as server:
        rs = RedisStore(server.url, "bench")
        rs.redis.config_set("hash-max-listpack-value", 128)
        for _ in range(10_100):  # fill the capped event stream first
            rs.redis.xadd(rs.keys.events, {"kind": "x"}, maxlen=10_000, approximate=True)
        base = used(rs)
        t0 = time.monotonic()
        load(rs, 0, a.pending, (3600, 7200))
        per_job = (used(rs) - base) / a.pending
        print(
            f"loaded {a.pending} pending jobs in {time.monotonic() - t0:.0f}s: "
            f"{per_job:.0f} B per pending job (used_memory delta / n)",
            flush=True,
        )
        finish(rs, 10**9, a.finished)
        ids = [f"j{i}" for i in random.Random(1).sample(range(a.pending), a.paused)]
        for job_id in ids:
            rs.pause(job_id)
        load(rs, 2 * 10**9, a.running, (0, 0))
        rs.claim_due({"default": a.running}, 600.0, "bench")
        index = {
            key: rs.redis.memory_usage(key)
            for key in (
                rs.keys.done("succeeded"),
                rs.keys.done("failed"),
                rs.keys.dead_jobs,
                rs.keys.paused,
            )
        }
        due = rs.keys.due("default")
        members = rs.redis.zrange(due, 0, -1)[:: max(1, a.pending // a.pages)]
        deep = [
            listing.encode_cursor(0, [float(rs.redis.zscore(due, m)), m])
            for m in random.Random(2).sample(members, min(20, len(members)))
        ]
        out = {
            "pending": a.pending,
            "bytes_per_pending_job": round(per_job),
            "index_bytes": index,
            "pages": {},
        }
        for state, starts in (
            ("scheduled", [None, *deep]),
            ("running", [None]),
            ("paused", [None]),
            ("succeeded", [None]),
            ("failed", [None]),
            ("dead", [None]),
            ("all", [None]),
            ("live", [None]),
        ):
            out["pages"][state] = summary(pages(rs, state, a.pages, starts))
            print(state, out["pages"][state], flush=True)
        print(json.dumps(out, indent=2))
        rs.close()


if __name__ == "__main__":
    main()
