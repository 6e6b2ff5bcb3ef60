#!/usr/bin/env python3
"""CPU per job, per thread kind, kernel and user apart (not a test; by hand).

A burst of N no-op jobs all due at one instant, run in process (``JobScheduler(4)``) or
by R replica processes (``duetime run``, 4 workers each) over a private redis-server.
CPU time is read per thread from ``/proc/<pid>/task/<tid>/stat`` (utime, stime) from
just before the jobs are due until the last one is recorded, and summed by thread kind:

* ``dispatcher`` (``duetime-dispatch-*``), ``workers`` (``duetime-<lane>-<i>``),
  ``others`` (timers, acks flusher, heartbeat, wake-up subscriber, main thread, ...);
* ``producer`` (in process: the thread that scheduled the burst, before it was due);
* ``redis`` (shared: the server's ``INFO cpu``, user and sys).

Threads are told apart by name: in process from ``threading.enumerate()``; a replica is
started through a small wrapper that gives each Python thread its kind as its OS name
(``prctl(PR_SET_NAME)``), so ``/proc/<pid>/task/<tid>/comm`` says what it is.

Compare two checkouts in one run, interleaved (each run a fresh interpreter whose
``PYTHONPATH`` is the checkout; ``PATH+KEY=VALUE`` also sets that in its environment,
and its replicas': ``+DUETIME_TRACING=1+BENCH_OTEL=all`` for tracing with the SDK,
tests/bench/bench_otel.py), medians of ``--runs``:

    PYTHONPATH=$PWD python tests/bench/probe_cpu.py --mode inprocess --runs 3 \\
        --compare main=../main,this=.
    PYTHONPATH=$PWD python tests/bench/probe_cpu.py --mode shared --replicas 3 \\
        --log-level default --runs 3 --compare main=../main,this=.

``--log-level``: ``ERROR``, or ``default`` (in process: Python's default logging, no
handler configured; shared: ``duetime run``'s default, INFO, written to /dev/null).

``--spread S`` (shared): the jobs are due evenly over S seconds instead of at once (a
steady rate, small claims: where a round trip per claim or per ack shows); recurring
jobs' anchors are spread alike; not for ``cron`` (every job fires on the whole second).
Shared mode also counts, per run, script calls, Redis commands (inside scripts too) and
requests read (~ round trips), without this probe's own polls and INFO calls.

Shared mode, ``--kind`` (issue 15's no-regression cases; CPU is per successful run):
``noop`` (the burst above), ``args200`` (the burst with ~200 B of different JSON kwargs
per job), ``retry`` (the burst, each job failing its first attempt and retried at once),
``recurring`` (``--jobs`` 1,000 jobs every 1 s anchored at one instant, ``--rounds`` runs
each) and ``cron`` (200 jobs ``* * * * * *``); the last
two also give the lag (start - scheduled occurrence, noted in each replica by
``bench.note``). ``--pending N`` adds N other one-off jobs due in 1-2 h first. Only APIs
that d064214 has too, so ``--compare before=<d064214 tree>,after=.`` works.
In shared mode the jobs are added once the replicas are up (a loaded box can take 10 s
and more to start three), due 3 s + N / 2000 s later. The replicas run from tests/bench,
and each ``--compare`` child from its checkout: ``python -c`` puts the working directory
ahead of ``PYTHONPATH``, so a replica started elsewhere would run that directory's code.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("dispatcher", "workers", "others")
JOB_KINDS = ("noop", "recurring", "cron", "args200", "retry", "stamp", "async", "keyed", "limited")
sys.path.insert(0, HERE)
import _common as common  # noqa: E402
from _common import task_times  # noqa: E402

KIND_TEXT = {
    "noop": "no-op jobs due at once",
    "recurring": "recurring jobs every 1 s, anchored together, {rounds} runs each",
    "cron": "cron jobs '* * * * * *' (every second), {rounds} runs each",
    "args200": "no-op jobs due at once, ~200 B of JSON kwargs each (all different)",
    "retry": "jobs due at once that fail once, then succeed (RetryPolicy(2, backoff=0))",
    "stamp": "no-op jobs due at once, bench.stamp (notes its start in memory; async's twin)",
    "async": "async def no-op jobs due at once (in process: awaits nothing; shared: "
    "bench.astamp, as stamp)",
    "keyed": "no-op jobs due at once, each with one of 100 limit keys (no limit declared)",
    "limited": "no-op jobs due at once, all of one limit key under a rate limit that never "
    "binds (10,000 per ms... as declared: 10,000 starts per 1 ms)",
}
KIND_HELP = "; ".join(f"{k}: {v.format(rounds='R')}" for k, v in KIND_TEXT.items())
EXTRA_ROWS = (
    ("replicas", "replicas, all threads (schedstat, exact)", "{:.1f}"),
    ("exact", "**Redis + replicas (exact)**", "**{:.1f}**"),
    ("calls", "script calls (FCALL or EVALSHA) per run", "{:.4f}"),
    ("commands", "Redis commands per run (inside scripts too)", "{:.4f}"),
    ("reads", "requests read per run (~ round trips)", "{:.4f}"),
    ("lag_p50", "lag p50, start - scheduled (ms)", "{:.1f}"),
    ("lag_p99", "lag p99 (ms)", "{:.1f}"),
    ("skipped", "occurrences skipped (misfire)", "{:.0f}"),
    ("late", "runs where jobs were due before all were added", "{:.0f}"),
)


def kind_of(name: str) -> str:
    import re

    if name.startswith("duetime-dispatch"):
        return "dispatcher"
    if re.fullmatch(r"duetime-.+-\d+", name):
        return "workers"
    return "others"


def add_delta(
    acc: dict[str, float],
    before: dict[int, tuple[str, float, float]],
    after: dict[int, tuple[str, float, float]],
    kind: dict[int, str],
) -> None:
    for tid, (comm, u, s) in after.items():
        _, u0, s0 = before.get(tid, (comm, 0.0, 0.0))
        k = kind.get(tid, comm if comm in KINDS else "others")
        acc[f"{k}_user"] = acc.get(f"{k}_user", 0.0) + u - u0
        acc[f"{k}_sys"] = acc.get(f"{k}_sys", 0.0) + s - s0


def run_inprocess(n: int, log_level: str, kind: str = "noop") -> dict[str, float]:
    import logging

    from scheduler import JobScheduler

    if log_level != "default":
        logging.getLogger("duetime").setLevel(log_level)
    done = threading.Event()
    left = [n]
    lock = threading.Lock()

    def job() -> None:
        with lock:
            left[0] -= 1
            if not left[0]:
                done.set()

    fn: Any = job
    if kind == "async":

        async def ajob() -> None:
            job()

        fn = ajob
    me = threading.get_native_id()
    with JobScheduler(4) as s:
        t0 = task_times("self")
        due = time.monotonic() + 1.0 + n / 20_000
        for _ in range(n):
            s.schedule(fn, max(0.0, due - time.monotonic()))
        t1 = task_times("self")
        time.sleep(max(0.0, due - time.monotonic()))
        if not done.wait(120):
            raise SystemExit(f"only {n - left[0]} of {n} jobs ran in 120 s")
        took = time.monotonic() - due
        t2 = task_times("self")
        kind = {t.native_id: kind_of(t.name) for t in threading.enumerate() if t.native_id}
        kind[me] = "others"
    acc: dict[str, float] = {}
    add_delta(acc, t1, t2, kind)
    p0, p1 = t0[me], t1[me]
    acc["producer_user"], acc["producer_sys"] = p1[1] - p0[1], p1[2] - p0[2]
    out = {k: v * 1e6 / n for k, v in acc.items()}
    out["jobs_s"] = n / took
    return out


def args200(i: int) -> dict[str, object]:
    """~200 B of JSON keyword arguments, different for every job (so a definition cache
    cannot serve a burst from one entry)."""
    kw: dict[str, object] = {"order": f"ord-{i:09d}", "customer": f"cust-{i % 9973:05d}"}
    kw |= {"items": [i % 7, i % 11, i % 13], "currency": "EUR", "note": ""}
    kw["note"] = "x" * (200 - len(json.dumps(kw, separators=(",", ":"))))
    return kw


def job_specs(
    kind: str, n: int, due: float, first: int = 0, total: int = 0, spread: float = 0.0
) -> list:
    """``n`` job definitions of ``kind``, jobs ``first`` .. ``first + n - 1`` of ``total``,
    job k due at ``due + spread * k / total`` (epoch s; recurring: anchored there, every
    1 s; cron: every second, so ``due`` and ``spread`` are unused)."""
    import shared_tasks as t

    from scheduler.model import At, Cron, Every, RetryPolicy
    from scheduler.specs import make_spec

    total = total or n
    ks = range(first, first + n)
    at = [due + spread * k / total for k in ks]
    if kind == "recurring":
        return [make_spec(t.note, Every(1.0, anchor=d)) for d in at]
    if kind == "cron":
        return [make_spec(t.note, Cron("* * * * * *")) for _ in ks]
    if kind == "args200":
        return [make_spec(t.noop, At(d), kwargs=args200(k)) for k, d in zip(ks, at)]
    if kind in ("stamp", "async"):  # bench_async.py's no-op pair
        fn = t.astamp if kind == "async" else t.stamp
        return [make_spec(fn, At(d), kwargs={"due_ms": int(d * 1000)}) for d in at]
    if kind == "retry":
        policy = RetryPolicy(max_attempts=2, backoff=0.0, jitter=0.0)
        return [make_spec(t.flaky, At(d), retry=policy) for d in at]
    if kind == "keyed":  # needs flow control (docs/flow-control.md)
        return [make_spec(t.noop, At(d), limit_key=f"k{k % 100}") for k, d in zip(ks, at)]
    if kind == "limited":
        return [make_spec(t.noop, At(d), limit_key="bench") for d in at]
    return [make_spec(t.noop, At(d)) for d in at]


def add(store: Any, kind: str, n: int, due: float, spread: float = 0.0) -> None:
    for i in range(0, n, 500):
        store.add_many(job_specs(kind, min(500, n - i), due, i, n, spread))


def run_shared(
    n: int,
    replicas: int,
    log_level: str,
    kind: str = "noop",
    rounds: int = 10,
    pending: int = 0,
    spread: float = 0.0,
) -> dict[str, float]:
    """One burst (or ``rounds`` occurrences of ``n`` recurring jobs), due at once or
    evenly over ``spread`` s, with ``pending`` other one-off jobs due in 1-2 h; CPU per
    successful run from just before the first due time until the last run is recorded."""
    import random
    import tempfile

    import redis

    from scheduler.embedded import EmbeddedRedis
    from scheduler.model import At
    from scheduler.specs import make_spec
    from scheduler.stores.redis import RedisStore

    sys.path.insert(0, HERE)
    import shared_tasks

    ns, lagdir = "probe", tempfile.mkdtemp(prefix="probe-lag-")
    runs = n * (rounds if kind in ("recurring", "cron") else 1)
    with EmbeddedRedis(appendonly=False) as srv:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        store = RedisStore(srv.url, ns)
        rng, now = random.Random(1), time.time()
        for i in range(0, pending, 2000):  # the backlog: not part of any figure
            store.add_many([make_spec(shared_tasks.noop, At(now + 3600 + rng.random() * 3600))
                            for _ in range(min(2000, pending - i))])  # fmt: skip
        env = dict(os.environ, BENCH_LAG_DIR=lagdir)
        procs = common.start_replicas(srv.url, ns, replicas, log_level, env=env)
        try:  # replicas first: on a loaded box they may take 10 s and more to start
            common.wait_up(r, ns, replicas, time.time() + 120)
            due = time.time() + 3 + n / 2000  # adding takes ~n / 8000 s (more when loaded)
            if kind == "limited":  # one rate limit on every job, never binding
                from scheduler import flow

                store.set_limit("bench", flow.limit(rate=10_000, per=0.001))
            add(store, kind, n, due, spread)
            late = time.time() > due - 0.3
            if kind == "cron":  # each first occurrence: the next whole second
                due = float(int(time.time()) + 1)
            time.sleep(max(0.0, due - 0.2 - time.time()))
            before = [task_times(p.pid) for p in procs]
            ns0 = [common.thread_ns(p.pid) for p in procs]
            c0, t0, k0 = r.info("cpu"), r.info("stats"), r.info("commandstats")
            s0, polls = common.succeeded(r, ns), 0
            while common.succeeded(r, ns) < s0 + runs:
                polls += 1
                if time.time() > due + 120 + rounds + spread:
                    raise SystemExit(f"only {common.succeeded(r, ns) - s0} of {runs} runs in time")
                time.sleep(0.005)
            took = time.time() - due
            ns1 = [common.thread_ns(p.pid) for p in procs]
            after = [task_times(p.pid) for p in procs]
            c1, t1, k1 = r.info("cpu"), r.info("stats"), r.info("commandstats")
            stats = r.hgetall(f"duetime:{{{ns}}}:stats")
        finally:
            common.stop(procs)
        store.close()
    acc: dict[str, float] = {
        "redis_user": float(c1["used_cpu_user"]) - float(c0["used_cpu_user"]),
        "redis_sys": float(c1["used_cpu_sys"]) - float(c0["used_cpu_sys"]),
    }
    for b, a in zip(before, after, strict=True):
        add_delta(acc, b, a, {})
    out = {k: v * 1e6 / runs for k, v in acc.items()}
    out["replicas"] = common.ns_delta(ns0, ns1) * 1e6 / runs
    out["exact"] = out["replicas"] + out["redis_user"] + out["redis_sys"]
    out["jobs_s"] = runs / took
    out |= common.redis_counts(t0, k0, t1, k1, polls + 5, runs)
    if late:
        out["late"] = 1.0  # jobs were due before they were all added
    if kind in ("recurring", "cron"):
        out["skipped"] = float(stats.get("skipped", 0))
    lags = []
    for name in os.listdir(lagdir):
        with open(os.path.join(lagdir, name)) as f:
            lags += [float(x) for x in f.read().split()]
    if lags:
        out["lag_p50"], out["lag_p99"] = common.percentile(lags, 50), common.percentile(lags, 99)
    return out


def child(a: argparse.Namespace) -> None:
    if a.mode == "inprocess":
        res = run_inprocess(a.jobs, a.log_level, a.kind)
    else:
        res = run_shared(a.jobs, a.replicas, a.log_level, a.kind, a.rounds, a.pending, a.spread)
    print(json.dumps(res))


def spawn(path: str, a: argparse.Namespace) -> dict[str, float]:
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--mode", a.mode]
    argv += ["--jobs", str(a.jobs), "--replicas", str(a.replicas), "--log-level", a.log_level]
    argv += ["--kind", a.kind, "--rounds", str(a.rounds), "--pending", str(a.pending)]
    argv += ["--spread", str(a.spread)]
    path, *sets = path.split("+")  # "PATH+KEY=VALUE+...": the child's environment too
    path = os.path.abspath(path)
    env = dict(os.environ, PYTHONPATH=path, **dict(s.split("=", 1) for s in sets))
    # cwd=path: a replica runs `python -c`, whose sys.path starts with the current
    # directory, ahead of PYTHONPATH: from another checkout it would run that one's code
    out = subprocess.run(argv, env=env, cwd=path, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise SystemExit(f"run with PYTHONPATH={path} failed:\n{out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def table(results: dict[str, list[dict[str, float]]]) -> str:
    names = list(results)
    med = {
        k: {f: statistics.median(r.get(f, 0.0) for r in v) for f in v[0]}
        for k, v in results.items()
    }
    rows = ["producer", *KINDS, "redis"]
    lines = ["| µs per job (user + sys) | " + " | ".join(names) + " |"]
    lines.append("|---|" + "---|" * len(names))
    for row in rows:
        if not any(f"{row}_user" in m for m in med.values()):
            continue
        cells = [
            f"{m.get(row + '_user', 0):.1f} + {m.get(row + '_sys', 0):.1f}" for m in med.values()
        ]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    for m in med.values():
        m["total"] = sum(v for f, v in m.items() if f.endswith(("_user", "_sys"))
                         and not f.startswith("producer"))  # fmt: skip
    lines.append("| **total (without producer)** | " + " | ".join(
        f"**{m['total']:.1f}**" for m in med.values()) + " |")  # fmt: skip
    lines.append("| jobs/s | " + " | ".join(f"{m['jobs_s']:,.0f}" for m in med.values()) + " |")
    for key, label, form in EXTRA_ROWS:
        if any(key in m for m in med.values()):
            cells = [form.format(m[key]) if key in m else "-" for m in med.values()]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["inprocess", "shared"], default="inprocess")
    ap.add_argument("--jobs", type=int, default=None,
                    help="jobs (default 20,000; recurring: 1,000; cron: 200)")  # fmt: skip
    ap.add_argument("--kind", default="noop",
                    help="one or more, comma-separated (each run of each checkout runs every "
                    "kind, interleaved); in process: noop or async; shared: " + KIND_HELP)  # fmt: skip
    ap.add_argument("--rounds", type=int, default=10, help="recurring/cron: runs of each job")
    ap.add_argument("--pending", type=int, default=0,
                    help="shared: other one-off jobs pending (due in 1-2 h) meanwhile")  # fmt: skip
    ap.add_argument(
        "--spread", type=float, default=0.0, help="shared: due evenly over S s (0: at once)"
    )
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--log-level", default="ERROR", help="ERROR, or default")
    ap.add_argument("--compare", default="", help="name=PYTHONPATH,... (default: this one)")
    ap.add_argument("--json", default="", help="also write every run's figures here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    kinds = a.kind.split(",")
    if not set(kinds) <= set(JOB_KINDS):
        ap.error(f"--kind: one or more of {', '.join(JOB_KINDS)}")
    if a.mode == "inprocess" and not set(kinds) <= {"noop", "async"}:
        ap.error("--kind: in process, noop or async")
    if a.jobs is None:
        a.jobs = {"recurring": 1000, "cron": 200}.get(kinds[0], 20_000)
    if a.spread and (a.mode != "shared" or a.kind == "cron"):
        ap.error("--spread applies to --mode shared, every --kind but cron")
    if a.child:
        return child(a)
    paths = dict(p.split("=", 1) for p in a.compare.split(",") if p) or {
        "this": os.environ.get("PYTHONPATH", os.getcwd())
    }
    if len(kinds) > 1:  # a column per (checkout, kind)
        paths = {f"{name} {k}": (path, k) for name, path in paths.items() for k in kinds}
    else:
        paths = {name: (path, kinds[0]) for name, path in paths.items()}
    results: dict[str, list[dict[str, float]]] = {k: [] for k in paths}
    for i in range(a.runs):
        order = list(paths.items()) if i % 2 == 0 else list(paths.items())[::-1]
        for name, (path, kind) in order:  # interleaved, alternated: drifts hit all alike
            res = spawn(path, argparse.Namespace(**{**vars(a), "kind": kind}))
            results[name].append(res)
            print(f"  run {i + 1} {name}: " + " ".join(f"{k} {v:.4g}" for k, v in res.items()),
                  file=sys.stderr)  # fmt: skip
    where = "in process, JobScheduler(4)" if a.mode == "inprocess" else (
        f"{a.replicas} replica(s) x 4 workers")  # fmt: skip
    what = "; ".join(
        (f"{a.jobs} " + KIND_TEXT["async" if k == "async" else "noop"].split(" (")[0])
        if a.mode == "inprocess"
        else f"kind {k}: {a.jobs} " + KIND_TEXT[k].format(rounds=a.rounds)
        for k in kinds
    )
    if a.spread:
        what = what.replace("due at once", f"due evenly over {a.spread:g} s")
        what = what.replace("anchored together", f"anchors evenly over {a.spread:g} s")
    backlog = f", {a.pending:,} other jobs pending" if a.pending else ""
    print(f"{what}{backlog}, {where}, log level {a.log_level}, "
          f"median of {a.runs} (load {os.getloadavg()[0]:.2f}):")  # fmt: skip
    print(table(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "load": os.getloadavg()[0], "runs": results}, f, indent=1)


if __name__ == "__main__":
    main()
