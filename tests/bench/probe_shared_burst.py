#!/usr/bin/env python3
"""Probe of duetime's own cost per job in a shared-mode burst (not a test, not a peer
comparison: see bench_shared.py for that).

N jobs due at once in a private redis-server, run by R replica processes (`duetime run`,
4 workers each); the task does nothing at all (`--task noop`) or writes one record to a
witness Redis like bench_shared.py's task (`--task witness`). Prints jobs/s and the CPU
used per job by Redis and by the replicas (from when all replicas are up), and the
script calls per job. Typical use:

    PYTHONPATH=$PWD python tests/bench/probe_shared_burst.py --replicas 1 --task noop --runs 3

The replicas run with ``--log-level ERROR`` unless ``--log-level`` says otherwise;
``--log-level default`` passes no level, so they log as ``duetime run`` does by default.
Their logs go to /dev/null (formatted and written, not kept).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

import redis  # noqa: E402
from _common import procs_cpu, redis_cpu  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import At  # noqa: E402
from scheduler.specs import make_spec  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402

NS = "probe"


def one(n: int, replicas: int, task: str, log_level: str) -> dict[str, float]:
    import shared_tasks  # registers bench.hit (the witness task)

    with EmbeddedRedis(appendonly=False) as srv:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        store = RedisStore(srv.url, NS)
        due = time.time() + 5 + n / 5000  # adding 20,000 takes ~2.5 s, 3 replicas start in ~2 s
        fn = shared_tasks.noop if task == "noop" else shared_tasks.hit
        for i in range(0, n, 500):
            store.add_many(
                [
                    make_spec(fn, At(due), kwargs={"due_ms": int(due * 1000), "tag": f"P{j}"})
                    for j in range(i, min(n, i + 500))
                ]
            )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]))
        argv = [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--redis",
            srv.url,
            "--namespace",
            NS,
            "--import",
            "shared_tasks",
            "--workers",
            "4",
            "--lease",
            "30",
        ]
        if log_level != "default":
            argv += ["--log-level", log_level]
        procs = [
            subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(replicas)
        ]
        try:
            while len(r.keys(f"duetime:{{{NS}}}:replica:*")) < replicas:  # started up
                if time.time() > due:
                    raise SystemExit("the replicas were not up before the jobs were due")
                time.sleep(0.01)
            p0, c0 = procs_cpu([p.pid for p in procs]), redis_cpu(r)
            s0 = r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
            while int(r.hget(f"duetime:{{{NS}}}:stats", "succeeded") or 0) < n:
                if time.time() > due + 120:
                    raise SystemExit("the burst did not finish within 120 s")
                time.sleep(0.005)
            took = time.time() - due
            p1, c1 = procs_cpu([p.pid for p in procs]), redis_cpu(r)
            s1 = r.info("commandstats")["cmdstat_evalsha"]["calls"]
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
        store.close()
        return {
            "jobs_s": n / took,
            "redis_us": (c1 - c0) * 1e6 / n,
            "replicas_us": (p1 - p0) * 1e6 / n,
            "calls": (s1 - s0) / n,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--task", choices=["noop", "witness"], default="noop")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--log-level",
        default="ERROR",
        help="the replicas' --log-level; 'default': none given (duetime run's default)",
    )
    a = ap.parse_args()
    witness = None
    if a.task == "witness":
        witness = EmbeddedRedis(appendonly=False).start()
        os.environ["BENCH_WITNESS_URL"] = witness.url
    try:
        runs = [one(a.jobs, a.replicas, a.task, a.log_level) for _ in range(a.runs)]
    finally:
        if witness is not None:
            witness.stop()
    for r in runs:
        print("  run: " + "  ".join(f"{k} {v:,.2f}" for k, v in r.items()), file=sys.stderr)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(
        f"{a.jobs} jobs, {a.replicas} replica(s) x 4 workers, task {a.task}, "
        f"log level {a.log_level}, median of "
        f"{a.runs}: {med['jobs_s']:,.0f} jobs/s; CPU per job: Redis {med['redis_us']:.1f} us, "
        f"replicas {med['replicas_us']:.0f} us; "
        f"{med['calls']:.3f} script calls per job"
    )


if __name__ == "__main__":
    main()
