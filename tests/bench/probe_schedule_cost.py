"""The producer's cost of ``JobScheduler.schedule`` in process: CPU of the calling thread
per call (``time.thread_time``) and wall time, over loops of N calls, jobs due in an hour
(``--delay 3600``: nothing runs meanwhile) or now (``--delay 0``: workers run them while
the loop goes on). Not a test; by hand, for the code on PYTHONPATH (run it on two
checkouts alternately to compare; docs/performance.md, "Producer cost"):

    PYTHONPATH=. python tests/bench/probe_schedule_cost.py --calls 20000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from scheduler import JobScheduler


def job() -> None:
    pass


def loop(calls: int, delay: float) -> tuple[float, float]:
    """(µs of the calling thread's CPU, µs of wall time) per ``schedule`` call."""
    with JobScheduler(4) as s:
        for _ in range(200):  # warm: the dispatcher and workers up, code paths warm
            s.schedule(job, delay)
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            s.schedule(job, delay)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return cpu / calls * 1e6, wall / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--delay", type=float, nargs="+", default=[3600.0, 0.0])
    args = ap.parse_args()
    for delay in args.delay:
        runs = [loop(args.calls, delay) for _ in range(args.runs)]
        print(
            f"schedule(job, {delay:g}): {statistics.median(r[0] for r in runs):.1f} us of the "
            f"caller's CPU, {statistics.median(r[1] for r in runs):.1f} us wall per call "
            f"(medians of {args.runs} x {args.calls:,})"
        )


if __name__ == "__main__":
    main()
