#!/usr/bin/env python3
"""Instructions per job, sync against ``async def`` (valgrind; not a test; by hand).

CPU time per job on a shared 2-core box moves by ±30 % from one run to the next with the
other work on it (the same burst measured 30-53 µs per job in one sitting), so a 10 %
target cannot be judged from a few runs. Instructions executed do not depend on that
load: this probe counts them with valgrind (``cachegrind --cache-sim=no``, ~50x slower)
for the same bursts as bench_async.py, as the difference between a run of ``--jobs``
jobs and one of ``--base`` jobs (the interpreter's start and the replicas' idle work cancel
out), divided by the difference in jobs:

* ``inprocess``: ``JobScheduler(4)``, the jobs scheduled due at once (the scheduling
  thread counts, as in bench_async.py's CPU per job), a sync no-op and an ``async def``
  one that awaits nothing;
* ``shared``: ``--replicas`` ``duetime run`` processes (4 workers each) over a private
  redis-server (not counted), the jobs added due at once before they start;
  ``bench.stamp`` and ``bench.astamp`` (shared_tasks.py's no-op pair).

Instructions are not time: the async path allocates more objects per job (a coroutine,
a Task, its weak reference), so its time ratio may be a little higher than its
instruction ratio. Each (checkout, kind) runs once per ``--runs``, interleaved:

    PYTHONPATH=$PWD python tests/bench/probe_instructions.py --mode inprocess \\
        --compare before=$BEFORE,after=. --runs 2
    PYTHONPATH=$PWD python tests/bench/probe_instructions.py --mode shared --replicas 3 \\
        --compare before=$BEFORE,after=.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]

INPROCESS = r"""
import sys, threading
from scheduler import JobScheduler
kind, n = sys.argv[1], int(sys.argv[2])
done, left, lock = threading.Event(), [n], threading.Lock()
def tick():
    with lock:
        left[0] -= 1
        if not left[0]:
            done.set()
async def atick():
    tick()
fn = atick if kind == "async" else tick
with JobScheduler(4) as s:
    for _ in range(n):
        s.schedule(fn, 0)
    if n and not done.wait(1800):
        raise SystemExit("the burst did not finish")
"""


def refs(stderr: str) -> int:
    m = re.search(r"I\s+refs:\s+([\d,]+)", stderr)
    if m is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def inprocess(path: str, kind: str, n: int) -> int:
    env = dict(os.environ, PYTHONPATH=path)
    argv = [*VALGRIND, sys.executable, "-c", INPROCESS, kind, str(n)]
    out = subprocess.run(argv, env=env, cwd=path, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise SystemExit(f"in-process run failed:\n{out.stderr[-2000:]}")
    return refs(out.stderr)


def shared(path: str, kind: str, n: int, replicas: int) -> int:
    import _common as common
    import redis
    import shared_tasks

    from scheduler.embedded import EmbeddedRedis
    from scheduler.model import At
    from scheduler.specs import make_spec
    from scheduler.stores.redis import RedisStore

    fn = shared_tasks.astamp if kind == "async" else shared_tasks.stamp
    with EmbeddedRedis(appendonly=False) as srv:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        store = RedisStore(srv.url, "ir")
        due = time.time()
        kw = {"due_ms": int(due * 1000)}
        for i in range(0, n, 500):
            store.add_many([make_spec(fn, At(due), kwargs={**kw, "tag": f"B{j}"})
                            for j in range(i, min(n, i + 500))])  # fmt: skip
        # from tests/bench (HERE) with the checkout next on the path: see probe_cpu.py
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, path]))
        argv = [*VALGRIND, sys.executable, "-c", common.WRAPPER, "run", "--redis", srv.url,
                "--namespace", "ir", "--import", "shared_tasks", "--workers", "4",
                "--lease", "30", "--log-level", "ERROR"]  # fmt: skip
        procs = [
            subprocess.Popen(
                argv,
                env=env,
                cwd=HERE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for _ in range(replicas)
        ]
        try:
            deadline = time.time() + 1800
            while common.succeeded(r, "ir") < n:
                if time.time() > deadline:
                    raise SystemExit(f"only {common.succeeded(r, 'ir')} of {n} jobs ran")
                time.sleep(0.2)
        finally:
            for p in procs:
                p.terminate()
        total = sum(refs(p.communicate(timeout=300)[1]) for p in procs)
        store.close()
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["inprocess", "shared"], default="inprocess")
    ap.add_argument("--jobs", type=int, default=None, help="default 4,000 (shared: 10,000)")
    ap.add_argument("--base", type=int, default=None, help="default 0 (shared: 2,000)")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--compare", default="", help="name=PYTHONPATH,... (default: this one)")
    a = ap.parse_args()
    jobs = a.jobs or (10_000 if a.mode == "shared" else 4_000)
    base = a.base if a.base is not None else (2_000 if a.mode == "shared" else 0)
    paths = dict(p.split("=", 1) for p in a.compare.split(",") if p) or {
        "this": os.environ.get("PYTHONPATH", os.getcwd())
    }
    sys.path.insert(0, HERE)
    per: dict[tuple[str, str], list[float]] = {}
    for i in range(a.runs):
        for name, path in paths.items():
            for kind in ("sync", "async") if i % 2 == 0 else ("async", "sync"):
                path = os.path.abspath(path)
                if a.mode == "inprocess":
                    lo, hi = inprocess(path, kind, base), inprocess(path, kind, jobs)
                else:
                    lo, hi = (shared(path, kind, n, a.replicas) for n in (base, jobs))
                per.setdefault((name, kind), []).append((hi - lo) / (jobs - base))
                print(f"  run {i + 1} {name} {kind}: {per[name, kind][-1]:,.0f} per job",
                      file=sys.stderr)  # fmt: skip
    where = "in process, JobScheduler(4)" if a.mode == "inprocess" else (
        f"{a.replicas} replica(s) x 4 workers")  # fmt: skip
    print(f"instructions per job ({jobs:,} minus {base:,} jobs due at once), {where}, "
          f"median of {a.runs}:")  # fmt: skip
    print("| checkout | sync | async | async/sync |\n|---|---|---|---|")
    for name in paths:
        s, x = (statistics.median(per[name, k]) for k in ("sync", "async"))
        print(f"| {name} | {s:,.0f} | {x:,.0f} | {x / s:.3f} |")


if __name__ == "__main__":
    main()
