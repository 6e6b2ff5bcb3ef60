"""Cost per operation of the in-process store at 10^3 and 10^5 pending jobs.

    python tests/bench/bench_costs.py

schedule (add), cancel, and claim + complete, single-threaded against MemoryStore on a
fake clock, so only the store's own work is timed (no threads, no waiting).
"""

from __future__ import annotations

import gc
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from scheduler.model import After, JobSpec  # noqa: E402
from scheduler.stores.memory import MemoryStore  # noqa: E402
from scheduler.testing import FakeClock  # noqa: E402

OPS = 1000


def job() -> None:
    pass


def measure(n: int) -> tuple[float, float, float]:
    clock = FakeClock()
    store = MemoryStore(clock)
    specs = [JobSpec(str(i), job, After(3600 + i % 997)) for i in range(n)]
    gc.collect()
    t0 = time.perf_counter()
    for spec in specs:
        store.add(spec)
    t1 = time.perf_counter()
    for i in range(0, n, n // OPS):
        store.cancel(str(i))
    t2 = time.perf_counter()
    clock.advance(3600 + 997)
    t3 = time.perf_counter()
    for _ in range(OPS):
        for claim in store.claim_due({"default": 1}, None, "bench").claims:
            store.complete(claim, None)
    t4 = time.perf_counter()
    return 1e6 * (t1 - t0) / n, 1e6 * (t2 - t1) / OPS, 1e6 * (t4 - t3) / OPS


if __name__ == "__main__":
    print(f"{'pending':>9}  {'schedule':>9}  {'cancel':>9}  {'claim+complete':>15}   (µs/op)")
    for n in (1_000, 10_000, 100_000):
        add, cancel, claim = measure(n)
        print(f"{n:>9,}  {add:9.1f}  {cancel:9.1f}  {claim:15.1f}")
