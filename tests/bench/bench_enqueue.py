#!/usr/bin/env python3
"""Producer cost: one delayed enqueue at a time, duetime vs huey, RQ, arq, saq, APScheduler 3.

Not part of the test run (see tests/bench/README.md). Each (system, run) is a fresh
producer process against a fresh private redis-server, so the process CPU time it reports
is the producer's alone. Per call it reports wall time, the producer's CPU time (user +
system, all its threads: ``time.process_time``) and the Redis server's CPU time
(``INFO cpu``); for duetime also ``Client.enqueue_many`` per job (batches of ``--batch``).

    PYTHONPATH=. /work/main/.venv-bench/bin/python tests/bench/bench_enqueue.py --runs 3 \\
        --before /tmp/main-tree

``--before DIR`` adds a "duetime(before)" column run from another checkout (e.g. a
``git archive`` of main), interleaved run by run with this one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))
SYSTEMS = ("duetime", "huey", "rq", "arq", "saq", "apscheduler")
COLUMNS = (
    ("wall_us", "wall us/call"),
    ("cpu_us", "producer CPU us/call"),
    ("redis_us", "Redis CPU us/call"),
)


def _dt(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


# ------------------------------------------------------------------- the child process
def _redis_cpu(r) -> float:  # type: ignore[no-untyped-def]
    c = r.info("cpu")
    return float(c["used_cpu_sys"]) + float(c["used_cpu_user"])


def _measure(r, n: int, call, warm: int = 200) -> dict:  # type: ignore[no-untyped-def]
    """Per-call wall, producer CPU and Redis CPU of ``call(i)`` for i in range(n), after
    ``warm`` calls (connections open, scripts loaded, code paths warm)."""
    base = time.time() * 1000 + 7_200_000  # due in 2 h: they stay pending
    for i in range(warm):
        call(base - 1 - i, "w")
    rc, cpu, wall = _redis_cpu(r), time.process_time(), time.perf_counter()
    for i in range(n):
        call(base + i, "x")
    wall, cpu, rc = time.perf_counter() - wall, time.process_time() - cpu, _redis_cpu(r) - rc
    return {"wall_us": wall / n * 1e6, "cpu_us": cpu / n * 1e6, "redis_us": rc / n * 1e6}


def child(system: str, url: str, n: int, batch: int) -> dict:
    import redis

    sys.path.insert(0, HERE)
    r = redis.Redis.from_url(url)
    out: dict = {}
    if system == "duetime":
        import shared_tasks  # noqa: F401  (registers "bench.hit")

        import scheduler
        from scheduler import Client

        out["module"] = scheduler.__file__
        c = Client(url, namespace="bench")

        def at(due: float, tag: str) -> None:
            c.enqueue("bench.hit", kwargs={"due_ms": int(due), "tag": tag}, at=due / 1000)

        def delay(due: float, tag: str) -> None:
            c.enqueue("bench.hit", kwargs={"due_ms": int(due), "tag": tag}, delay=7200)

        out["at"] = _measure(r, n, at)
        out["delay"] = _measure(r, n, delay)
        per_batch = []
        for _ in range(max(1, n // batch)):
            items = [
                {"task": "bench.hit", "kwargs": {"due_ms": i, "tag": "m"}, "delay": 7200}
                for i in range(batch)
            ]
            per_batch.append(_measure(r, 1, lambda due, tag: c.enqueue_many(items), warm=1))
        out["many"] = {k: statistics.median(b[k] for b in per_batch) / batch for k in per_batch[0]}
        c.close()
    elif system == "huey":
        import shared_tasks

        _, task = shared_tasks.make_huey(url)
        out["at"] = _measure(
            r, n, lambda due, tag: task.schedule(args=(int(due), tag), eta=_dt(due))
        )
    elif system == "rq":
        import shared_tasks
        from rq import Queue

        q = Queue("default", connection=redis.Redis.from_url(url))
        out["at"] = _measure(
            r, n, lambda due, tag: q.enqueue_at(_dt(due), shared_tasks.rq_hit, int(due), tag)
        )
    elif system in ("arq", "saq"):
        loop = asyncio.new_event_loop()
        if system == "arq":
            from arq import create_pool
            from arq.connections import RedisSettings

            pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(url)))

            def one(due: float, tag: str):  # type: ignore[no-untyped-def]
                return pool.enqueue_job("arq_hit", int(due), tag, _defer_until=_dt(due))

        else:
            from saq import Queue as SaqQueue

            sq = SaqQueue.from_url(url)
            loop.run_until_complete(sq.connect())

            def one(due: float, tag: str):  # type: ignore[no-untyped-def]
                return sq.enqueue("saq_hit", scheduled=due / 1000, due_ms=int(due), tag=tag)

        # one awaited call at a time, each driven to completion by the loop
        out["at"] = _measure(r, n, lambda due, tag: loop.run_until_complete(one(due, tag)))
    elif system == "apscheduler":
        import logging
        from urllib.parse import urlsplit

        import shared_tasks
        from apscheduler.jobstores.redis import RedisJobStore
        from apscheduler.schedulers.background import BackgroundScheduler

        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        u = urlsplit(url)
        s = BackgroundScheduler(
            jobstores={"default": RedisJobStore(host=u.hostname, port=u.port, db=0)},
            timezone=timezone.utc,
        )
        s.start(paused=True)  # a producer: jobs are stored, none run here
        out["at"] = _measure(
            r,
            n,
            lambda due, tag: s.add_job(
                shared_tasks.aps_hit, "date", run_date=_dt(due), args=[int(due), tag]
            ),
        )
        s.shutdown(wait=False)
    else:
        raise SystemExit(f"unknown system {system!r}")
    return out


# ----------------------------------------------------------------------- the parent
def run_one(label: str, root: str, system: str, n: int, batch: int) -> dict:
    from scheduler.embedded import EmbeddedRedis

    with EmbeddedRedis(appendonly=False) as server:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, HERE]))
        argv = [sys.executable, os.path.abspath(__file__), "--child", system, server.url]
        argv += ["--n", str(n), "--batch", str(batch)]
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if p.returncode:
            raise RuntimeError(f"{label}: exit {p.returncode}: {p.stderr[-2000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=3000, help="timed calls per run (default 3000)")
    ap.add_argument("--batch", type=int, default=1000, help="enqueue_many batch size")
    ap.add_argument("--before", metavar="DIR", help="another duetime checkout to compare")
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--json", metavar="PATH", help="also write the raw figures as JSON")
    ap.add_argument("--child", nargs=2, metavar=("SYSTEM", "URL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.n, args.batch)))
        return
    sys.path.insert(0, CHECKOUT)
    plan = []
    for system in args.systems:
        if system == "duetime":
            if args.before:
                plan.append(("duetime(before)", args.before, system))
            plan.append(("duetime", CHECKOUT, system))
        else:
            plan.append((system, CHECKOUT, system))
    raw: dict[str, list[dict]] = {label: [] for label, _, _ in plan}
    for run in range(1, args.runs + 1):
        for label, root, system in plan:
            print(f"  {label} run {run} ...", file=sys.stderr, flush=True)
            raw[label].append(run_one(label, root, system, args.n, args.batch))
    rows = []
    for label, runs in raw.items():
        for kind in ("at", "delay", "many"):
            if kind not in runs[0]:
                continue
            what = {
                "at": "enqueue(at=)" if label.startswith("duetime") else "delayed enqueue",
                "delay": "enqueue(delay=)",
                "many": f"enqueue_many (per job, batches of {args.batch})",
            }[kind]
            med = {k: statistics.median(r[kind][k] for r in runs) for k, _ in COLUMNS}
            rows.append((label, what, med))
    load = os.getloadavg()[0]
    print(
        f"producer cost, medians of {args.runs} runs, {args.n} calls each "
        f"(1-min load at the end {load:.2f})"
    )
    print("| system | call | " + " | ".join(h for _, h in COLUMNS) + " |")
    print("|---|---|" + "---:|" * len(COLUMNS))
    for label, what, med in rows:
        print(f"| {label} | {what} | " + " | ".join(f"{med[k]:.0f}" for k, _ in COLUMNS) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"raw": raw, "load": load, "args": vars(args)}, f, indent=2)


if __name__ == "__main__":
    main()
