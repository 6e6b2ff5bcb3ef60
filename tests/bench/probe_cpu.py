#!/usr/bin/env python3
"""CPU per no-op job, per thread kind, kernel and user apart (not a test; by hand).

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
``PYTHONPATH`` is the checkout), medians of ``--runs``:

    PYTHONPATH=$PWD python tests/bench/probe_cpu.py --mode inprocess --runs 3 \\
        --compare main=../main,this=.
    PYTHONPATH=$PWD python tests/bench/probe_cpu.py --mode shared --replicas 3 \\
        --log-level default --runs 3 --compare main=../main,this=.

``--log-level``: ``ERROR``, or ``default`` (in process: Python's default logging, no
handler configured; shared: ``duetime run``'s default, INFO, written to /dev/null).
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

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("dispatcher", "workers", "others")

# run inside each replica process: name each OS thread by its kind, then run `duetime run`
WRAPPER = r"""
import ctypes, re, sys, threading
libc = ctypes.CDLL(None)
def kind(name):
    if name.startswith("duetime-dispatch"):
        return "dispatcher"
    if re.fullmatch(r"duetime-.+-\d+", name):
        return "workers"
    return "others"
inner = threading.Thread._bootstrap_inner
def named(self):
    libc.prctl(15, kind(self.name).encode(), 0, 0, 0)
    inner(self)
threading.Thread._bootstrap_inner = named
libc.prctl(15, b"others", 0, 0, 0)
sys.argv = ["duetime", *sys.argv[1:]]
from scheduler.cli import main
main()
"""


def kind_of(name: str) -> str:
    import re

    if name.startswith("duetime-dispatch"):
        return "dispatcher"
    if re.fullmatch(r"duetime-.+-\d+", name):
        return "workers"
    return "others"


def task_times(pid: int | str) -> dict[int, tuple[str, float, float]]:
    """tid -> (comm, user s, sys s) of every thread of ``pid`` now."""
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue  # exited meanwhile
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[int(tid)] = (comm, int(fields[11]) / TICK, int(fields[12]) / TICK)
    return out


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


def run_inprocess(n: int, log_level: str) -> dict[str, float]:
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

    me = threading.get_native_id()
    with JobScheduler(4) as s:
        t0 = task_times("self")
        due = time.monotonic() + 1.0 + n / 20_000
        for _ in range(n):
            s.schedule(job, max(0.0, due - time.monotonic()))
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


def run_shared(n: int, replicas: int, log_level: str) -> dict[str, float]:
    import redis

    from scheduler.embedded import EmbeddedRedis
    from scheduler.model import At
    from scheduler.specs import make_spec
    from scheduler.stores.redis import RedisStore

    sys.path.insert(0, HERE)
    import shared_tasks

    ns = "probe"
    with EmbeddedRedis(appendonly=False) as srv:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        store = RedisStore(srv.url, ns)
        due = time.time() + 15 + n / 20000  # the replicas start meanwhile (slow when loaded)
        for i in range(0, n, 500):
            store.add_many(
                [make_spec(shared_tasks.noop, At(due)) for _ in range(i, min(n, i + 500))]
            )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ["PYTHONPATH"]]))
        argv = [sys.executable, "-c", WRAPPER, "run", "--redis", srv.url, "--namespace", ns]
        argv += ["--import", "shared_tasks", "--workers", "4", "--lease", "30"]
        if log_level != "default":
            argv += ["--log-level", log_level]
        # cwd: ``python -c`` puts the working directory first on sys.path, ahead of
        # PYTHONPATH, so run from a directory without the package (else every tree's
        # replicas would run the code of the directory the probe was started in)
        procs = [
            subprocess.Popen(
                argv, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            for _ in range(replicas)
        ]
        try:
            while len(r.keys(f"duetime:{{{ns}}}:replica:*")) < replicas:
                if time.time() > due - 0.5:
                    raise SystemExit("the replicas were not up before the jobs were due")
                time.sleep(0.01)
            before = [task_times(p.pid) for p in procs]
            c0 = r.info("cpu")
            while int(r.hget(f"duetime:{{{ns}}}:stats", "succeeded") or 0) < n:
                if time.time() > due + 120:
                    raise SystemExit("the burst did not finish within 120 s")
                time.sleep(0.005)
            took = time.time() - due
            after = [task_times(p.pid) for p in procs]
            c1 = r.info("cpu")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
        store.close()
    acc: dict[str, float] = {
        "redis_user": float(c1["used_cpu_user"]) - float(c0["used_cpu_user"]),
        "redis_sys": float(c1["used_cpu_sys"]) - float(c0["used_cpu_sys"]),
    }
    for b, a in zip(before, after, strict=True):
        add_delta(acc, b, a, {})
    out = {k: v * 1e6 / n for k, v in acc.items()}
    out["jobs_s"] = n / took
    return out


def child(a: argparse.Namespace) -> None:
    if a.mode == "inprocess":
        res = run_inprocess(a.jobs, a.log_level)
    else:
        res = run_shared(a.jobs, a.replicas, a.log_level)
    print(json.dumps(res))


def spawn(path: str, a: argparse.Namespace) -> dict[str, float]:
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--mode", a.mode]
    argv += ["--jobs", str(a.jobs), "--replicas", str(a.replicas), "--log-level", a.log_level]
    env = dict(os.environ, PYTHONPATH=path)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
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
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["inprocess", "shared"], default="inprocess")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--log-level", default="ERROR", help="ERROR, or default")
    ap.add_argument("--compare", default="", help="name=PYTHONPATH,... (default: this one)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    paths = dict(p.split("=", 1) for p in a.compare.split(",") if p) or {
        "this": os.environ.get("PYTHONPATH", os.getcwd())
    }
    results: dict[str, list[dict[str, float]]] = {k: [] for k in paths}
    for i in range(a.runs):
        for name, path in paths.items():  # interleaved: load drifts hit both alike
            res = spawn(path, a)
            results[name].append(res)
            print(f"  run {i + 1} {name}: " + " ".join(f"{k} {v:.1f}" for k, v in res.items()),
                  file=sys.stderr)  # fmt: skip
    where = "in process, JobScheduler(4)" if a.mode == "inprocess" else (
        f"{a.replicas} replica(s) x 4 workers")  # fmt: skip
    print(f"{a.jobs} no-op jobs due at once, {where}, log level {a.log_level}, "
          f"median of {a.runs} (load {os.getloadavg()[0]:.2f}):")  # fmt: skip
    print(table(results))


if __name__ == "__main__":
    main()
