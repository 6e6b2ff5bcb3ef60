#!/usr/bin/env python3
"""Flow control measured on a real redis-server with 5 replicas x 4 workers (not a test;
by hand; docs/performance.md#flow-control). Each job notes its start (and its end) in a
separate *witness* Redis (tests/bench/shared_tasks.py), so what is measured is what ran.

Scenarios (``--only`` picks some):

* ``rate``: a limit of 10 starts per second on one key, ``--rate-jobs`` (2,000) due at
  once: the most starts seen in any 1-second window, and the key's throughput against
  the limit;
* ``concurrency``: a limit of 2 on one key, 100 jobs of 200 ms; one replica is SIGKILLed
  mid-run: the most invocations seen running at once (a killed replica's runs end at
  its kill), and when the slots came back;
* ``fairness``: key A with 10,000 due jobs, key B with 10 due 50 ms later: when B's
  jobs started, against their due time;
* ``priority``: 10,000 jobs of priority 0 and 300 of priority 5, all due at once: the
  start lag p99 of each;
* ``arrivals``: 10,000 jobs of priority 0 due at once, and 300 of priority 5 coming due
  one by one while that backlog drains (one every 5 ms from 100 ms after it was due):
  the start lag p99 of each.

    PYTHONPATH=$PWD python tests/bench/bench_flow.py [--only rate,fairness]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as common  # noqa: E402
import shared_tasks  # noqa: E402

from scheduler import flow  # noqa: E402
from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import At  # noqa: E402
from scheduler.specs import make_spec  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402


def hits(w: Any, tag: str) -> list[tuple[float, float, int]]:
    """(due ms, start ms, pid) of each start recorded under ``tag``."""
    out = []
    for line in w.lrange(shared_tasks.HITS, 0, -1):
        t, due, start, pid, _ = line.decode().split("|")
        if t == tag:
            out.append((float(due), float(start), int(pid)))
    return out


def add(store: RedisStore, fn: Any, due: float, n: int, kwargs: Any, opts: Any) -> None:
    """``n`` jobs of task ``fn`` due at ``due``, in batches of 500."""
    for i in range(0, n, 500):
        store.add_many(
            [make_spec(fn, At(due), kwargs=kwargs, **opts) for _ in range(min(500, n - i))]
        )


def wait_for(w: Any, tag: str, n: int, deadline: float) -> list[tuple[float, float, int]]:
    while True:
        got = hits(w, tag)
        if len(got) >= n or time.time() > deadline:
            return got
        time.sleep(0.2)


def scenario_rate(store: RedisStore, w: Any, jobs: int) -> dict[str, float]:
    store.set_limit("rate:key", flow.limit(rate=10, per=1))
    due = time.time() + 2
    add(store, shared_tasks.hit, due, jobs, kwargs={"due_ms": int(due * 1000), "tag": "rate"},
        opts={"limit_key": "rate:key"})  # fmt: skip
    got = wait_for(w, "rate", jobs, due + jobs / 10 + 60)
    starts = sorted(s for _, s, _ in got)
    if os.environ.get("BENCH_FLOW_DEBUG"):
        print([round(x - starts[0]) for x in starts])
    most, j = 0, 0
    for i, s in enumerate(starts):  # every window [s, s + 1000) that begins at a start
        while j < len(starts) and starts[j] < s + 1000:
            j += 1
        most = max(most, j - i)
    # throughput: n starts take n / 10 windows of 1 s; the last window ends 1 s after the
    # last start begins it (a paced run at exactly the limit scores 1.0)
    span = (starts[-1] - starts[0]) / 1000 + 1 if starts else 1.0
    rate = len(starts) / span
    return {"jobs": jobs, "started": len(starts), "max_in_1s": most, "starts_per_s": rate,
            "of_limit": rate / 10}  # fmt: skip


def scenario_concurrency(store: RedisStore, w: Any, procs: list[Any], r: Any) -> dict[str, float]:
    store.set_limit("conc:key", flow.limit(concurrency=2))
    due = time.time() + 2
    add(store, shared_tasks.hold, due, 100, kwargs={"due_ms": int(due * 1000), "tag": "conc",
        "hold_s": 0.2}, opts={"limit_key": "conc:key"})  # fmt: skip
    time.sleep(max(0.0, due - time.time()) + 3)  # mid-run: ~30 of 100 done
    by_pid = {p.pid: p for p in procs}
    victim = None
    while victim is None and time.time() < due + 60:  # a replica running one of them
        ended = {(d, s) for d, s, _ in _ends(w, "conc-end")}
        busy = [pid for d, s, pid in hits(w, "conc") if (d, s) not in ended and pid in by_pid]
        victim = by_pid[busy[0]] if busy else None
    assert victim is not None, "no replica ran a job of the key"
    procs.remove(victim)
    killed_at = time.time() * 1000
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    deadline = due + 200  # the killed ones run again after their lease (30 s)
    while common.succeeded(r, "flow") < 100 and time.time() < deadline:
        time.sleep(0.2)
    got = hits(w, "conc")
    ends = {(int(due), start): end for due, start, end in _ends(w, "conc-end")}
    spans = []
    for d, s, pid in got:
        end = ends.get((int(d), s))
        if end is None:  # it never ended: its replica was killed
            end = killed_at if pid == victim.pid else None
        if end is not None:
            spans.append((s, end))
    events = sorted([(e, -1) for _, e in spans] + [(s, 1) for s, _ in spans])  # ends first
    running = most = 0
    back = -1.0  # when 2 ran at once again after the kill: the dead owner's slot came back
    for t, step in events:
        running += step
        most = max(most, running)
        if back < 0 and t > killed_at and running == 2:
            back = (t - killed_at) / 1000
    return {"runs_started": len(got), "max_running": most, "slot_back_after_kill_s": back}


def _ends(w: Any, tag: str) -> list[tuple[float, float, float]]:
    out = []
    for line in w.lrange(shared_tasks.HITS, 0, -1):
        t, due, start, _, end = line.decode().split("|")
        if t == tag:
            out.append((float(due), float(start), float(end)))
    return out


def scenario_fairness(store: RedisStore, w: Any) -> dict[str, float]:
    due = time.time() + 4
    add(store, shared_tasks.hit, due, 10_000, kwargs={"due_ms": int(due * 1000), "tag": "A"},
        opts={"limit_key": "fair:A"})  # fmt: skip
    due_b = due + 0.05
    add(store, shared_tasks.hit, due_b, 10, kwargs={"due_ms": int(due_b * 1000), "tag": "B"},
        opts={"limit_key": "fair:B"})  # fmt: skip
    b = wait_for(w, "B", 10, due + 120)
    a = wait_for(w, "A", 10_000, due + 300)
    lag_b = [s - d for d, s, _ in b]
    return {"b_started": len(b), "b_last_lag_s": max(lag_b) / 1000,
            "a_drain_s": (max(s for _, s, _ in a) - due * 1000) / 1000}  # fmt: skip


def scenario_priority(store: RedisStore, w: Any) -> dict[str, float]:
    due = time.time() + 4
    for _ in range(20):  # interleaved: 500 low, then 15 high, ...
        add(store, shared_tasks.hit, due, 500, kwargs={"due_ms": int(due * 1000), "tag": "low"},
            opts={})  # fmt: skip
        add(store, shared_tasks.hit, due, 15, kwargs={"due_ms": int(due * 1000), "tag": "high"},
            opts={"priority": 5})  # fmt: skip
    low = wait_for(w, "low", 10_000, due + 300)
    high = wait_for(w, "high", 300, due + 300)
    p99 = {
        k: common.percentile([s - d for d, s, _ in v], 99)
        for k, v in (("low", low), ("high", high))
    }
    return {"low_p99_ms": p99["low"], "high_p99_ms": p99["high"],
            "high_over_low": p99["high"] / p99["low"] if p99["low"] else -1}  # fmt: skip


def scenario_arrivals(store: RedisStore, w: Any) -> dict[str, float]:
    due = time.time() + 4
    add(store, shared_tasks.hit, due, 10_000, kwargs={"due_ms": int(due * 1000), "tag": "low"},
        opts={})  # fmt: skip
    highs = []
    for i in range(300):
        at = due + 0.1 + i * 0.005
        highs.append(make_spec(shared_tasks.hit, At(at), priority=5,
                               kwargs={"due_ms": int(at * 1000), "tag": "high"}))  # fmt: skip
    store.add_many(highs)
    low = wait_for(w, "low", 10_000, due + 300)
    high = wait_for(w, "high", 300, due + 300)
    p99 = {
        k: common.percentile([s - d for d, s, _ in v], 99)
        for k, v in (("low", low), ("high", high))
    }
    last_low = max(s for _, s, _ in low) / 1000 - due
    return {"low_p99_ms": p99["low"], "high_p99_ms": p99["high"], "low_drain_s": last_low,
            "high_over_low": p99["high"] / p99["low"] if p99["low"] else -1}  # fmt: skip


#: how many one-off jobs each scenario enqueues (each commits exactly once)
JOBS = {"rate": lambda a: a.rate_jobs, "concurrency": lambda a: 100,
        "fairness": lambda a: 10_010, "priority": lambda a: 10_300,
        "arrivals": lambda a: 10_300}  # fmt: skip


def audit(w: Any, r: Any, ns: str, jobs: int) -> dict[str, int]:
    """Exactly once and never early: commits against jobs enqueued (0 lost, 0 doubled),
    and starts before their due time (due_ms is rounded down: a start before it is early)."""
    deadline = time.time() + 60
    while common.succeeded(r, ns) < jobs and time.time() < deadline:
        time.sleep(0.2)
    done = common.succeeded(r, ns)
    early = 0
    for line in w.lrange(shared_tasks.HITS, 0, -1):
        tag, due, start, _pid, _ = line.decode().split("|")
        early += not tag.endswith("-end") and float(start) < float(due)
    return {"lost": max(0, jobs - done), "doubled": max(0, done - jobs), "early": early}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", default="rate,concurrency,fairness,priority,arrivals")
    ap.add_argument("--rate-jobs", type=int, default=2000)
    ap.add_argument("--replicas", type=int, default=5)
    a = ap.parse_args()
    import redis

    for name in a.only.split(","):
        with EmbeddedRedis(appendonly=False) as srv, EmbeddedRedis(appendonly=False) as wit:
            os.environ["BENCH_WITNESS_URL"] = wit.url
            w = redis.Redis.from_url(wit.url)
            r = redis.Redis.from_url(srv.url, decode_responses=True)
            ns = "flow"
            store = RedisStore(srv.url, ns)
            procs = common.start_replicas(srv.url, ns, a.replicas, "WARNING", named=False)
            try:
                common.wait_up(r, ns, a.replicas, time.time() + 120)
                if name == "rate":
                    out = scenario_rate(store, w, a.rate_jobs)
                elif name == "concurrency":
                    out = scenario_concurrency(store, w, procs, r)
                elif name == "fairness":
                    out = scenario_fairness(store, w)
                elif name == "arrivals":
                    out = scenario_arrivals(store, w)
                else:
                    out = scenario_priority(store, w)
                out.update(audit(w, r, ns, JOBS[name](a)))
                print(name, " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in out.items()), flush=True)  # fmt: skip
            finally:
                common.stop(procs)
                store.close()


if __name__ == "__main__":
    main()
