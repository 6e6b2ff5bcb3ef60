#!/usr/bin/env python3
"""Results benchmark (issue 34, item 4): how soon a waiting handle returns after its job's
commit, and what waiting handles cost Redis at rest.

Not part of the test run. On a private ``redis-server`` (``EmbeddedRedis``) with
``--replicas`` ``duetime run`` processes (``start_replicas``, task ``bench.noop``):

* latency: ``--jobs`` one-offs due over ``--spread`` seconds from ``LEAD`` s ahead, each
  waited for by its own handle before it is due (sync: a thread per handle; async: one task per
  handle in one loop); per job, (when ``result()`` returned) minus (the commit: the
  ``succeeded`` event's Redis time, ms); p50/p99/max;
* at rest: ``--jobs`` handles wait (async) for jobs due in an hour, no replica running;
  the Redis commands counted by ``INFO commandstats`` over 2 s (the two INFO calls
  excluded).

    PYTHONPATH=. .venv/bin/python tests/bench/bench_results.py [--jobs 1000] [--replicas 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import redis  # noqa: E402
from _common import percentile, start_replicas, stop, wait_up  # noqa: E402

from scheduler import AsyncClient, Client  # noqa: E402
from scheduler.embedded import EmbeddedRedis  # noqa: E402


def commits(url: str, ns: str, n: int) -> dict[str, float]:
    """job id -> its commit's Redis time (epoch s), from the namespace's events."""
    with Client(url, namespace=ns) as c:
        deadline = time.time() + 30
        while True:
            got = {e.job_id: e.at for e in c.events(limit=10 * n) if e.kind == "succeeded"}
            if len(got) >= n or time.time() > deadline:
                return got
            time.sleep(0.1)


LEAD = 6.0  # seconds from the enqueue to the first due time: every handle waits by then


def due_plan(n: int, spread: float) -> list[float]:
    t0 = time.time() + LEAD
    return [t0 + spread * i / n for i in range(n)]


def sync_run(url: str, ns: str, n: int, spread: float) -> list[float]:
    returned: dict[str, float] = {}
    with Client(url, namespace=ns) as c:
        hs = [c.enqueue("bench.noop", at=at) for at in due_plan(n, spread)]
        lock = threading.Lock()

        def wait(h: object) -> None:
            h.result(timeout=60)  # type: ignore[attr-defined]
            now = time.time()
            with lock:
                returned[str(h)] = now

        threads = [threading.Thread(target=wait, args=(h,), daemon=True) for h in hs]
        for t in threads:  # a few at a time: the client's connection pool is bounded
            t.start()
            time.sleep(0.002)
        for t in threads:
            t.join()
    done = commits(url, ns, n)
    return [(returned[j] - done[j]) * 1000 for j in returned if j in done]


def async_run(url: str, ns: str, n: int, spread: float) -> list[float]:
    returned: dict[str, float] = {}

    async def main() -> None:
        async with AsyncClient(url, namespace=ns) as c:
            hs = [await c.enqueue("bench.noop", at=at) for at in due_plan(n, spread)]

            async def wait(h: object) -> None:
                await h.result(timeout=60)  # type: ignore[attr-defined]
                returned[str(h)] = time.time()

            await asyncio.gather(*(wait(h) for h in hs))

    asyncio.run(main())
    done = commits(url, ns, n)
    return [(returned[j] - done[j]) * 1000 for j in returned if j in done]


def at_rest(url: str, ns: str, n: int) -> int:
    r = redis.Redis.from_url(url)

    def calls() -> int:
        return sum(v["calls"] for v in r.info("commandstats").values())

    counted: list[int] = []

    async def main() -> None:
        async with AsyncClient(url, namespace=ns) as c:
            hs = [await c.enqueue("bench.noop", delay=3600) for _ in range(n)]
            waits = [asyncio.ensure_future(h.result(timeout=30)) for h in hs]
            await asyncio.sleep(2.0)  # every handle registered
            before = calls()
            await asyncio.sleep(2.0)
            counted.append(calls() - before - 1)  # the first INFO's own call
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    asyncio.run(main())
    r.close()
    return counted[0]


def line(name: str, ms: list[float]) -> str:
    return (
        f"{name:<6} n={len(ms):<5} p50 {percentile(ms, 50):6.2f} ms  "
        f"p99 {percentile(ms, 99):6.2f} ms  max {max(ms):6.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--spread", type=float, default=2.0, help="seconds the jobs' due times span")
    args = ap.parse_args()
    with EmbeddedRedis(appendonly=False) as server:
        url, base = server.url, f"res{uuid.uuid4().hex[:6]}"
        print(f"redis {url}; {args.jobs} jobs, {args.replicas} replicas, spread {args.spread}s")
        for mode, run in (("sync", sync_run), ("async", async_run)):
            ns = f"{base}{mode}"
            procs = start_replicas(url, ns, args.replicas, "default")
            try:
                wait_up(redis.Redis.from_url(url), ns, args.replicas, time.time() + 60)
                print(line(mode, run(url, ns, args.jobs, args.spread)))
            finally:
                stop(procs)
        rest = at_rest(url, f"{base}rest", args.jobs)
        print(f"at rest: {args.jobs} handles waiting, {rest} Redis commands in 2 s")


if __name__ == "__main__":
    main()
