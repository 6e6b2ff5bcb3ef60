"""CPU per job of a burst of no-op jobs through ``JobScheduler`` (in-process), to see what
the facade's read-out (``stats()``: a lag window fed on every claim) costs.

    PYTHONPATH=. python tests/bench/probe_facade_cost.py --jobs 20000 --runs 5

Prints process CPU time (all threads) per job, median of the runs, for the code on
PYTHONPATH: run it on two checkouts to compare (docs/guarantees.md has the figures).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from scheduler import JobScheduler


def burst(jobs: int, workers: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) to schedule ``jobs`` no-ops due now and run them all."""
    done = threading.Event()
    left = [jobs]
    lock = threading.Lock()

    def job() -> None:
        with lock:
            left[0] -= 1
            if not left[0]:
                done.set()

    with JobScheduler(workers) as s:
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(jobs):
            s.schedule(job, 0)
        if not done.wait(120):
            raise SystemExit(f"only {jobs - left[0]} of {jobs} jobs ran in 120 s")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--no-readout",
        action="store_true",
        help="replace the facade's lag window by the engine's no-op metrics (the read-out's "
        "own cost is the difference)",
    )
    args = ap.parse_args()
    if args.no_readout:
        import scheduler.api as api
        from scheduler.metrics import Metrics

        class NoReadout(Metrics):
            def recent(self) -> dict[str, list[float]]:
                return {}

        api.LagWindow = NoReadout  # type: ignore[attr-defined,misc]
    burst(2000, args.workers)  # warm up
    runs = [burst(args.jobs, args.workers) for _ in range(args.runs)]
    cpu = statistics.median(c for c, _ in runs) / args.jobs * 1e6
    wall = statistics.median(w for _, w in runs) / args.jobs * 1e6
    each = ", ".join(f"{c / args.jobs * 1e6:.1f}" for c, _ in runs)
    print(f"{args.jobs} no-op jobs, {args.workers} workers, {args.runs} runs: CPU {cpu:.1f} µs/job "
          f"(median; runs: {each}), wall {wall:.1f} µs/job")  # fmt: skip


if __name__ == "__main__":
    main()
