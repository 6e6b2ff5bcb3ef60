"""Failover and WAIT, measured (docs/failover.md; issue 5 F9, issue 6 part 3).

Two parts, on a fresh primary + replica + three sentinels per run (tests/sentinel_fixtures.py)
and a separate witness redis-server:

1. ``loss``: the failover-under-load scenario of tests/integration/failover.py, ``--runs``
   times per mode: fault ``kill`` (SIGKILL the primary) or ``stop`` (SIGSTOP it until the
   failover is done, then SIGCONT: a split brain), each without and with ``wait_replicas=1``.
   With WAIT, a killed primary is restarted after the failover (it rejoins as a replica), so
   the new primary has a replica to WAIT for.
2. ``cost``: what WAIT costs without a fault: the latency of one ``Client.enqueue`` (p50,
   p99) and the rate of an in-process claim+complete loop (100 due jobs per claim), each
   with ``wait_replicas`` 0 and 1.

    PYTHONPATH=. python tests/bench/bench_failover.py --runs 5            # both parts
    PYTHONPATH=. python tests/bench/bench_failover.py --only cost --runs 5

Prints one JSON line per run and a summary table (medians over runs, totals of losses).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
import uuid

from scheduler import Client
from scheduler.embedded import EmbeddedRedis
from scheduler.model import After
from scheduler.stores.redis import RedisStore
from tests.helpers import spec
from tests.integration.failover import FailoverReport, run_failover
from tests.sentinel_fixtures import SentinelCluster

MODES = [("kill", 0), ("kill", 1), ("stop", 0), ("stop", 1)]


def loss(runs: int, witness_url: str, faults: list[str]) -> list[FailoverReport]:
    reports = []
    for fault, wait in [m for m in MODES if m[0] in faults]:
        for i in range(runs):
            print(f"loss: {fault} wait={wait} run {i + 1}/{runs}", file=sys.stderr)
            with SentinelCluster() as cluster:
                log_dir = pathlib.Path(tempfile.mkdtemp(prefix="duetime-failover-"))
                r = run_failover(
                    cluster,
                    witness_url,
                    log_dir,
                    wait_replicas=wait,
                    fault=fault,
                    restart_old=bool(wait),
                    before=2.0,
                    after=2.0,
                )
                shutil.rmtree(log_dir, ignore_errors=True)
            print(r.line())
            reports.append(r)
    return reports


def loss_table(reports: list[FailoverReport]) -> None:
    print(
        "\n| fault | WAIT | runs | acked (sum) | lost, never ran | lost, had run | "
        "lost though WAIT-confirmed | re-runs (same attempt) | data_loss events | "
        "lost claims / enqueues detected | "
        "failover s (median) | producer stall s (median) | split brain s (median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for fault, wait in MODES:
        rs = [r for r in reports if r.fault == fault and r.wait_replicas == wait]
        if not rs:
            continue
        print(
            f"| {fault} | {wait} | {len(rs)} | {sum(r.acked for r in rs)} | "
            f"{sum(r.lost_never_ran for r in rs)} | {sum(r.lost_but_ran for r in rs)} | "
            f"{sum(r.lost_confirmed for r in rs) if wait else '-'} | "
            f"{sum(r.reruns for r in rs)} ({sum(r.reruns_same_attempt for r in rs)}) | "
            f"{sum(r.data_loss_events for r in rs)} | "
            f"{sum(r.lost_claims_detected for r in rs)} / "
            f"{sum(r.lost_writes_detected for r in rs)} | "
            f"{statistics.median(r.failover_s for r in rs):.1f} | "
            f"{statistics.median(r.stall_s for r in rs):.1f} | "
            f"{statistics.median(r.split_s for r in rs):.1f} |"
        )


def cost(runs: int) -> list[dict[str, float]]:
    rows = []
    for i in range(runs):
        with SentinelCluster() as cluster:
            for wait in (0, 1):
                print(f"cost: wait={wait} run {i + 1}/{runs}", file=sys.stderr)
                rows.append(
                    {
                        "wait": wait,
                        **_enqueue_latency(cluster.url, wait),
                        **_claim_complete_rate(cluster.url, wait),
                    }
                )
                print(json.dumps(rows[-1]))
    return rows


def _enqueue_latency(url: str, wait: int, n: int = 2000) -> dict[str, float]:
    ns = f"c{uuid.uuid4().hex[:8]}"
    with Client(url, namespace=ns, wait_replicas=wait, wait_timeout_ms=1000) as client:
        for _ in range(100):  # warm-up: connections, script cache
            client.enqueue("bench.x", delay=3600)
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            client.enqueue("bench.x", delay=3600)
            lat.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
    lat.sort()
    return {
        "enqueue_p50_ms": lat[n // 2] * 1000,
        "enqueue_p99_ms": lat[int(n * 0.99)] * 1000,
        "enqueues_per_s": n / total,
    }


def _claim_complete_rate(url: str, wait: int, n: int = 3000) -> dict[str, float]:
    store = RedisStore(url, f"c{uuid.uuid4().hex[:8]}", wait_replicas=wait, wait_timeout_ms=1000)
    store.add_many([spec(f"j{i}", After(0)) for i in range(n)])
    done = 0
    t0 = time.perf_counter()
    while done < n:
        batch = store.claim_due({"default": 100}, 30, "bench")
        for c in batch.claims:
            store.complete(c, None)
        done += len(batch.claims)
    rate = n / (time.perf_counter() - t0)
    store.close()
    return {"claim_complete_per_s": rate}


def cost_table(rows: list[dict[str, float]]) -> None:
    print(
        "\n| WAIT | runs | enqueue p50 ms | enqueue p99 ms | enqueues/s (1 thread) | "
        "claim+complete jobs/s (1 thread) |"
    )
    print("|---|---|---|---|---|---|")
    for wait in (0, 1):
        rs = [r for r in rows if r["wait"] == wait]
        if not rs:
            continue

        def med(key: str, rs: list[dict[str, float]] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        print(
            f"| {wait} | {len(rs)} | {med('enqueue_p50_ms'):.2f} | "
            f"{med('enqueue_p99_ms'):.2f} | {med('enqueues_per_s'):.0f} | "
            f"{med('claim_complete_per_s'):.0f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["loss", "cost"], default=None)
    ap.add_argument(
        "--fault",
        choices=["kill", "stop"],
        action="append",
        default=None,
        help="loss: only these faults (repeatable; default both)",
    )
    args = ap.parse_args()
    reports, rows = [], []
    if args.only in (None, "cost"):
        rows = cost(args.runs)
    if args.only in (None, "loss"):
        with EmbeddedRedis() as witness:
            reports = loss(args.runs, witness.url, args.fault or ["kill", "stop"])
    if rows:
        cost_table(rows)
    if reports:
        loss_table(reports)


if __name__ == "__main__":
    main()
