#!/usr/bin/env python3
"""Where an ``async def`` job's extra CPU goes in a replica (issue 14; not a test).

N jobs due at once in a private redis-server, run by one ``duetime run`` replica (4
workers); the task is the no-op pair of ``shared_tasks.py`` (``bench.stamp`` /
``bench.astamp``) or, with ``--witness``, ``bench.hit`` / ``bench.ahit``. The replica
counts the thread CPU of each job's call (``workers.coroutines.call``, an async one's
``_Loop.run_job``) and of each whole ``Runner.run``, and each thread group's CPU
($BENCH_CALLS=1 in shared_tasks.py), sampled when the jobs are due and when the last
succeeded. Sync and async alternate. Typical use:

    PYTHONPATH=$PWD python tests/bench/probe_async_calls.py --jobs 20000 --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

import redis  # noqa: E402
import shared_tasks  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import At  # noqa: E402
from scheduler.specs import make_spec  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402


def sample(p: subprocess.Popen, out: str) -> dict:
    path = os.path.join(out, f"calls-{p.pid}.json")
    if os.path.exists(path):
        os.remove(path)
    p.send_signal(signal.SIGUSR2)
    deadline = time.time() + 10
    while not os.path.exists(path):
        if time.time() > deadline:
            raise SystemExit("the replica did not write its counters")
        time.sleep(0.01)
    with open(path) as f:
        return json.load(f)


def one(kind: str, n: int, witness: bool, out: str) -> str:
    fn = {
        ("sync", False): shared_tasks.stamp,
        ("async", False): shared_tasks.astamp,
        ("sync", True): shared_tasks.hit,
        ("async", True): shared_tasks.ahit,
    }[kind, witness]
    with EmbeddedRedis(appendonly=False) as srv:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        store = RedisStore(srv.url, "bench")
        due = time.time() + 4 + n / 6000
        kw = {"due_ms": int(due * 1000)}
        for i in range(0, n, 500):
            store.add_many(
                [
                    make_spec(fn, At(due), kwargs={**kw, "tag": f"B{j}"})
                    for j in range(i, min(n, i + 500))
                ]
            )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT]), BENCH_CALLS="1")
        env["BENCH_CALLS_DIR"] = out
        argv = [sys.executable, "-m", "scheduler", "run", "--redis", srv.url, "--namespace",
                "bench", "--import", "shared_tasks", "--workers", "4", "--lease", "30",
                "--resync", "5", "--log-level", "ERROR"]  # fmt: skip
        p = subprocess.Popen(argv, env=env, cwd=HERE, stdout=subprocess.DEVNULL)
        try:
            while not r.keys("duetime:{bench}:replica:*"):
                time.sleep(0.01)
            while time.time() < due - 0.3:
                time.sleep(0.01)
            a = sample(p, out)
            while int(r.hget("duetime:{bench}:stats", "succeeded") or 0) < n:
                if time.time() > due + 120:
                    raise SystemExit("the burst did not finish within 120 s")
                time.sleep(0.005)
            took = time.time() - due
            b = sample(p, out)
        finally:
            p.terminate()
            p.wait(60)
        store.close()
    per = {k: (b["ns"][k][0] - a["ns"][k][0]) / max(1, b["ns"][k][1] - a["ns"][k][1]) / 1000
           for k in ("call", "run")}  # fmt: skip
    threads = {k: (v - a["threads"].get(k, 0.0)) * 1e6 / n for k, v in b["threads"].items()}
    busy = ", ".join(f"{k} {v:.1f}" for k, v in sorted(threads.items()) if v >= 0.5)
    return (
        f"{kind:5s} {n / took:8,.0f} jobs/s  call {per['call']:6.1f} us  Runner.run "
        f"{per['run']:6.1f} us  thread CPU per job (us): {busy}  load {os.getloadavg()[0]:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--witness", action="store_true", help="the witness pair (bench.hit/ahit)")
    a = ap.parse_args()
    w = None
    if a.witness:
        w = EmbeddedRedis(appendonly=False).start()
        os.environ["BENCH_WITNESS_URL"] = w.url
    out = tempfile.mkdtemp(prefix="probe-async-")
    try:
        for k in range(a.runs):
            for kind in ("sync", "async") if k % 2 == 0 else ("async", "sync"):
                print(one(kind, a.jobs, a.witness, out), flush=True)
    finally:
        if w is not None:
            w.stop()


if __name__ == "__main__":
    main()
