#!/usr/bin/env python3
"""Dispatch lag of a mixed fleet beside a uniform one, in the same sitting (issue 30: lag
p99 no worse than a homogeneous fleet's). Not part of the test run.

Each run starts three replica processes on a private redis-server and enqueues the same
2,000 one-off jobs (seeded: due 0.5-3 s ahead, a quarter of them the task
``witness.new``), then reads each start from the witness (tests/faults/witness.py: the
server's own clock at the start, minus the scheduled time):

* uniform: three replicas that have every task;
* mixed: one that has every task, one with an older module that lacks ``witness.new``,
  one with no task module;
* two (``--fleets uniform,mixed,two``): two replicas that have every task (as many
  replicas as the mixed fleet has for ``witness.hit``).

Fleets alternate run by run; the figures are the medians over runs of each run's
p50/p99/max lag (ms) and of its attempts > 1 (0 expected for both).

    PYTHONPATH=$PWD python tests/bench/bench_mixed_fleet.py --runs 3
"""

from __future__ import annotations

import argparse
import pathlib
import random
import statistics
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scheduler import Client  # noqa: E402
from scheduler.embedded import EmbeddedRedis  # noqa: E402
from tests.faults.fleet import Fleet, wait_until, witness_log  # noqa: E402

OLD = ("tests.faults.witness",)
NEW = (*OLD, "tests.faults.witness_new")
FLEETS = {
    "uniform": (NEW, NEW, NEW),
    "mixed": (NEW, OLD, ()),
    "two": (NEW, NEW),  # the mixed fleet's replicas that can run witness.hit, uniform
}


def one_run(url: str, kind: str, jobs: int, seed: int) -> dict[str, float]:
    import redis

    ns, key = f"b{uuid.uuid4().hex[:8]}", f"w{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(url)
    with tempfile.TemporaryDirectory() as logs:
        fleets = []
        for i, imports in enumerate(FLEETS[kind]):
            log_dir = pathlib.Path(logs) / str(i)
            log_dir.mkdir()
            fleets.append(
                Fleet(url, ns, url, key, count=1, workers=4, lease=5, resync=1,
                      log_dir=log_dir, imports=imports,
                      extra=() if imports else ("--allow-no-tasks",))
            )  # fmt: skip
        try:
            alive = f"duetime:{{{ns}}}:replica:*"
            up = len(FLEETS[kind])
            assert wait_until(lambda: len(r.keys(alive)) == up, 30), "replicas not up"
            rng = random.Random(seed)
            news = set()
            with Client(url, namespace=ns) as client:
                for i in range(jobs):
                    name = "witness.new" if i % 4 == 0 else "witness.hit"
                    job_id = client.enqueue(name, delay=0.5 + 2.5 * rng.random())
                    if name == "witness.new":
                        news.add(job_id)
            assert wait_until(lambda: r.hlen(f"{key}:execs") >= jobs, 120), "jobs did not run"
            log = witness_log(r, key)
        finally:
            for f in fleets:
                f.stop()
    lags = sorted(e["start_ms"] - e["sched"] for e in log)
    q = statistics.quantiles(lags, n=100)
    new = [e["start_ms"] - e["sched"] for e in log if e["job"] in news]
    return {
        "p50": q[49],
        "p99": q[98],
        "max": lags[-1],
        "p99_new": statistics.quantiles(new, n=100)[98],  # the task one mixed replica has
        "retried": sum(1 for e in log if e["attempt"] > 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--fleets", default="uniform,mixed", help="of: " + ", ".join(FLEETS))
    args = ap.parse_args()
    kinds = args.fleets.split(",")
    out: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    with EmbeddedRedis() as server:
        for run in range(args.runs):
            for kind in kinds if run % 2 == 0 else reversed(kinds):
                got = one_run(server.url, kind, args.jobs, seed=run)
                out[kind].append(got)
                print(f"run {run} {kind:8s} " + " ".join(f"{k} {v:.1f}" for k, v in got.items()))
                time.sleep(1)
    print("medians over runs (lag ms: start by the witness's clock minus the scheduled time)")
    for kind, runs in out.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{kind:8s} " + " ".join(f"{k} {v:.1f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
