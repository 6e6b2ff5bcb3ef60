#!/usr/bin/env python3
"""Process lanes (issue 34): what a worker process costs and buys.

Not part of the test run; see tests/bench/README.md ("Process lanes"). From a checkout:

    PYTHONPATH=$PWD .venv/bin/python tests/bench/bench_process_lanes.py cpu --runs 3
    PYTHONPATH=$PWD .venv/bin/python tests/bench/bench_process_lanes.py hung --jobs 1000

* start -- how long ``multiprocessing``'s spawn takes to a worker process ready to run a
  job (a ``proc.whoami`` reply), for the first job of a fresh process lane.
* noop -- what a warm process lane adds per job: no-op jobs through each lane.
* cpu -- a batch of CPU-bound jobs (``proc.spin``: a pure-Python loop sized to ~50 ms on
  this box, measured alone first) on an in-process engine, in a thread lane of 2 workers
  and in a process lane of 2 workers, in the same sitting, alternating; wall time from
  the batch's enqueue to the engine idle. The process lane's children are warm (one job
  each first). Speed-up = thread time / process time (median over runs).
* hung -- N jobs that block in ``time.sleep(3600)`` with a 2 s timeout and one retry,
  over 3 ``duetime run`` replicas (``--lane p=2:process,kill_grace=1``) on a private
  redis-server: each attempt is stopped (SIGTERM), recorded timed out and retried once,
  then dead-lettered. Each run of a job appends (job id, attempt) to a shared file as
  it is stopped: lost = a job not dead-lettered after its 2 attempts, or with fewer
  runs; doubled = an attempt that ran twice. Also: how long after its timeout each stop
  was recorded, and the lane's live worker processes at the end (3 x 2 expected).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scheduler import Client, Lane, RetryPolicy  # noqa: E402
from scheduler.embedded import EmbeddedRedis, spawn_tied  # noqa: E402
from scheduler.engine import Scheduler  # noqa: E402
from tests.unit import process_jobs  # noqa: E402

TARGET_MS = 50.0


def calibrate() -> int:
    """Steps of ``proc.spin`` that take ~TARGET_MS here, alone (best of 5)."""
    n = 200_000
    best = min(_timed(process_jobs.spin, n) for _ in range(5))
    return int(n * TARGET_MS / 1000 / best)


def _timed(fn, *args) -> float:
    began = time.perf_counter()
    fn(*args)
    return time.perf_counter() - began


def start_cost(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        began = time.perf_counter()
        with Scheduler(1, lanes={"p": Lane(1, "process")}) as engine:
            job = engine.after("proc.whoami", 0, lane="p")
            engine.wait_idle(60)
            assert engine.get(job).state == "succeeded"
            out.append(time.perf_counter() - began)
    return out


def batch(engine: Scheduler, lane: str, jobs: int, n: int, check: bool = True) -> float:
    began = time.perf_counter()
    ids = [engine.after("proc.spin", 0, lane=lane, kwargs={"n": n}) for _ in range(jobs)]
    assert engine.wait_idle(600)
    took = time.perf_counter() - began
    assert not check or all(engine.get(j).state == "succeeded" for j in ids)
    return took


def cores_free(n: int) -> float:
    """The control: how many cores two bare processes get of this box right now (2.0 on
    two idle cores): the same loop, timed alone, then in two processes started together
    (past their spawn, at a barrier)."""
    import multiprocessing

    alone = _timed(process_jobs.spin, n)
    mp = multiprocessing.get_context("spawn")
    ready = mp.Barrier(3)
    procs = [mp.Process(target=_spin_after, args=(n, ready)) for _ in range(2)]
    for p in procs:
        p.start()
    ready.wait()
    began = time.perf_counter()
    for p in procs:
        p.join()
    return 2 * alone / (time.perf_counter() - began)


def _spin_after(n: int, ready: Any) -> None:
    ready.wait()
    process_jobs.spin(n)


def cpu(runs: int, jobs: int) -> None:
    n = calibrate()
    alone = min(_timed(process_jobs.spin, n) for _ in range(5))
    print(f"proc.spin n={n}: {alone * 1000:.1f} ms alone; batch of {jobs} jobs, 2 workers")
    lanes = {"t": 2, "p": Lane(2, "process")}
    load = os.getloadavg()[0]
    threads, procs = [], []
    with Scheduler(1, lanes=lanes) as engine:
        batch(engine, "p", 2, n)  # warm: each child has run a job
        for _ in range(runs):
            threads.append(batch(engine, "t", jobs, n))
            procs.append(batch(engine, "p", jobs, n))
    pairs = [a / b for a, b in zip(threads, procs, strict=True)]
    free = [cores_free(n * 10) for _ in range(3)]
    print(f"control, two bare processes at once: {', '.join(f'{c:.2f}' for c in free)} cores")
    print("(a process lane's speed-up over a thread lane is bounded by the control's figure)")
    print(f"load average before: {load:.2f} (the box is shared)")
    print(f"speed-up per run (thread / process, same run): {', '.join(f'{r:.2f}' for r in pairs)}")
    t, p = statistics.median(threads), statistics.median(procs)
    print(f"thread lane x2:  {t:.2f} s (runs {', '.join(f'{x:.2f}' for x in threads)})")
    print(f"process lane x2: {p:.2f} s (runs {', '.join(f'{x:.2f}' for x in procs)})")
    print(
        f"speed-up: {t / p:.2f}x; ideal on 2 idle cores: {jobs * alone / t:.2f} cores used "
        f"by threads, {jobs * alone / p:.2f} by processes"
    )


def noop(runs: int, jobs: int) -> None:
    """What a warm process lane adds per job: no-op jobs (``proc.spin`` of 0 steps)."""
    with Scheduler(1, lanes={"t": 2, "p": Lane(2, "process")}) as engine:
        batch(engine, "p", 4, 0)
        threads = [batch(engine, "t", jobs, 0, check=False) for _ in range(runs)]
        procs = [batch(engine, "p", jobs, 0, check=False) for _ in range(runs)]
    t, p = statistics.median(threads), statistics.median(procs)
    print(
        f"{jobs} no-op jobs, 2 workers: thread lane {t / jobs * 1e6:.0f} us/job, "
        f"process lane {p / jobs * 1e6:.0f} us/job (median of {runs})"
    )


def hung(jobs: int, replicas: int) -> None:
    server = EmbeddedRedis().start()
    work = Path(tempfile.mkdtemp(prefix="bench-proc-"))
    marker = work / "runs.txt"
    ns = "benchproc"
    procs = []
    try:
        for i in range(replicas):
            argv = [sys.executable, "-m", "scheduler", "run", "--redis", server.url]
            argv += ["--namespace", ns, "--import", "tests.unit.process_jobs", "--workers", "1"]
            argv += ["--lane", "p=2:process,kill_grace=1", "--resync", "0.5"]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            out = open(work / f"replica-{i}.log", "wb")  # noqa: SIM115 - the process's
            procs.append(spawn_tied(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
        retry = RetryPolicy(max_attempts=2, backoff=0.1, jitter=0)
        with Client(server.url, namespace=ns) as client:
            began = time.monotonic()
            ids = [
                client.enqueue(
                    "proc.hang",
                    delay=0,
                    lane="p",
                    timeout=2,
                    retry=retry,
                    kwargs={"marker": str(marker)},
                )
                for _ in range(jobs)
            ]
            deadline = began + 60 + jobs * 2 * 3 / (2 * replicas) * 2
            pending = set(ids)
            while pending and time.monotonic() < deadline:
                pending = {j for j in pending if client.get(j).state != "failed"}
                time.sleep(0.5)
            took = time.monotonic() - began
            infos = {j: client.get(j) for j in ids}
        runs = collections.Counter()
        for line in marker.read_text().splitlines():
            _cancelled, _reason, job, attempt = line.split()
            runs[(job, int(attempt))] += 1
        lost = [
            j
            for j, info in infos.items()
            if info.state != "failed"
            or [d.attempt for d in info.dead_letters] != [2]
            or runs[(j, 1)] < 1
            or runs[(j, 2)] < 1
        ]
        doubled = [k for k, c in runs.items() if c > 1]
        timed_out = sum(
            1
            for info in infos.values()
            if info.last_error and "InvocationTimeout" in info.last_error
        )
        alive = sum(p.poll() is None for p in procs)
        workers = [len(_children(p.pid)) for p in procs]
        print(
            f"{jobs} hung jobs x 2 attempts over {replicas} replicas x 2 workers: {took:.1f} s; "
            f"lost {len(lost)}, doubled {len(doubled)}, recorded timed out {timed_out}, "
            f"replicas alive {alive}/{replicas}, worker processes per replica {workers}"
        )
        stops = []
        for i in range(replicas):
            text = (work / f"replica-{i}.log").read_text()
            stops += [
                float(x.split("exited ")[1].split("s")[0])
                for x in text.splitlines()
                if "stopped (timeout): exited" in x
            ]
        if stops:
            stops.sort()
            print(
                f"SIGTERM to exit: p50 {stops[len(stops) // 2] * 1000:.0f} ms, "
                f"max {stops[-1] * 1000:.0f} ms over {len(stops)} stops (grace 1 s)"
            )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
        server.stop()


def _children(pid: int) -> list[int]:
    """The worker processes (spawned children) of a replica, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"spawn_main" in cmdline:
            out.append(int(entry.name))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["start", "cpu", "noop", "hung"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    if args.scenario == "start":
        costs = start_cost(args.runs)
        print(
            f"engine with a 1-process lane to its first job done: "
            f"{', '.join(f'{c * 1000:.0f}' for c in costs)} ms"
        )
    elif args.scenario == "noop":
        noop(args.runs, args.jobs or 2000)
    elif args.scenario == "cpu":
        cpu(args.runs, args.jobs or 40)
    else:
        hung(args.jobs or 1000, args.replicas)


if __name__ == "__main__":
    main()
