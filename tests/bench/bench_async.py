#!/usr/bin/env python3
"""Async benchmark (issue 14): ``async def`` jobs against duetime's sync path, arq and saq.

Not part of the test run. In one run, medians of ``--runs`` (default 3):

* in process (``JobScheduler(4)``, no Redis): a burst of 20,000 no-op jobs due at once
  (jobs/s, and process CPU per job, sync and async interleaved), and the lag of 2,000 jobs
  spread over 5 s (start minus due: p50/p99/max);
* shared (Redis; bench_shared.py's scenarios, witness and peer adapters, reused): the same
  burst and lag with 1 and 3 duetime replicas running a sync task (``bench.hit``) and an
  ``async def`` one (``bench.ahit``), next to arq and saq.

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install arq saq 'redis[hiredis]' psutil && pip install -e .
    PYTHONPATH=. .venv-bench/bin/python tests/bench/bench_async.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_shared as bs  # noqa: E402  (its adapters, scenarios, witness and report)

from scheduler import JobScheduler  # noqa: E402


# ------------------------------------------------------------------------ in process
def _counter(n: int) -> tuple[threading.Event, object]:
    done, left, lock = threading.Event(), [n], threading.Lock()

    def tick() -> None:
        with lock:
            left[0] -= 1
            if not left[0]:
                done.set()

    return done, tick


def _job(kind: str, body):
    if kind == "async":

        async def job() -> None:
            body()

        return job
    return body


def inproc_burst(kind: str, n: int, workers: int = 4) -> dict[str, float]:
    """``n`` no-op jobs due now: jobs/s from the first enqueue, process CPU per job."""
    done, tick = _counter(n)
    fn = _job(kind, tick)
    with JobScheduler(workers) as s:
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            s.schedule(fn, 0)
        if not done.wait(300):
            raise RuntimeError(f"in-process {kind} burst did not finish in 300 s")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        loop_lag = s.stats().loop_lag.max
    return {"jobs_s": n / wall, "cpu_us_job": cpu / n * 1e6, "loop_lag_max_ms": loop_lag * 1e3}


def inproc_lag(kind: str, n: int, spread: float, workers: int = 4) -> dict[str, float]:
    """``n`` jobs due at random times over ``spread`` s: start minus due time, in ms."""
    rng = random.Random(1234)
    lags: list[float] = []
    done, tick = _counter(n)
    with JobScheduler(workers) as s:
        t0 = time.time() + 0.5
        for _ in range(n):
            due = t0 + rng.uniform(0, spread)

            def body(due: float = due) -> None:
                lags.append((time.time() - due) * 1000)
                tick()

            s.schedule(_job(kind, body), due - time.time())
        if not done.wait(spread + 60):
            raise RuntimeError(f"in-process {kind} lag run did not finish")
    lags.sort()
    return {
        "lag_p50": bs.pct(lags, 50),
        "lag_p99": bs.pct(lags, 99),
        "lag_max": lags[-1],
        "lag_min": lags[0],
    }


def in_process(runs: int, quick: bool) -> str:
    n, lag_n, spread = (2_000, 400, 2.0) if quick else (20_000, 2_000, 5.0)
    raw: dict[str, list[dict[str, float]]] = {"sync": [], "async": []}
    load = []
    for run in range(runs):
        for kind in ("sync", "async") if run % 2 == 0 else ("async", "sync"):
            print(f"  in-process {kind} run {run + 1} ...", file=sys.stderr, flush=True)
            load.append(os.getloadavg()[0])
            raw[kind].append({**inproc_burst(kind, n), **inproc_lag(kind, lag_n, spread)})
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in raw.items()}
    spread_of = {
        k: {f: (min(r[f] for r in v), max(r[f] for r in v)) for f in v[0]} for k, v in raw.items()
    }
    lines = [
        f"in process: JobScheduler(4), burst of {n:,} no-op jobs; lag of {lag_n:,} jobs over "
        f"{spread:g} s; medians of {runs} (min..max), sync and async interleaved",
        f"{'figure':28s} {'sync def':>22s} {'async def':>22s} {'async/sync':>10s}",
    ]
    for f, label in (
        ("jobs_s", "burst (jobs/s)"),
        ("cpu_us_job", "burst CPU per job (us)"),
        ("lag_p50", "lag p50 (ms)"),
        ("lag_p99", "lag p99 (ms)"),
        ("lag_max", "lag max (ms)"),
        ("loop_lag_max_ms", "async loop lag max (ms)"),
    ):
        cells = []
        for k in ("sync", "async"):
            lo, hi = spread_of[k][f]
            cells.append(f"{med[k][f]:.1f} ({lo:.1f}..{hi:.1f})")
        ratio = f"{med['async'][f] / med['sync'][f]:.2f}" if med["sync"][f] else "-"
        lines.append(f"{label:28s} {cells[0]:>22s} {cells[1]:>22s} {ratio:>10s}")
    for f, label in (
        ("jobs_s", "burst jobs/s"),
        ("cpu_us_job", "burst CPU/job (us)"),
        ("lag_p99", "lag p99 (ms)"),
    ):
        for k in ("sync", "async"):
            lines.append(
                f"  per run {label:20s} {k:5s}: " + ", ".join(f"{r[f]:.1f}" for r in raw[k])
            )
    lines.append(
        f"1-min load average before each run: min {min(load):.2f}, median "
        f"{statistics.median(load):.2f}, max {max(load):.2f}"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------------ shared
class _AsyncTask:
    task = "bench.ahit"

    def enqueue_at(self, due_ms, tag):
        self.client.enqueue(self.task, kwargs={"due_ms": int(due_ms), "tag": tag}, at=due_ms / 1000)


class _StampTask(_AsyncTask):
    """The no-op pair: ``bench.stamp`` / ``bench.astamp`` note their start in memory only;
    the scenario sees completion through duetime's ``stats`` counter (``_Stamps``)."""

    task = "bench.stamp"

    def env(self, url, cron):
        return {**super().env(url, cron), "BENCH_STAMPS": "1"}


class _AsyncStampTask(_StampTask):
    task = "bench.astamp"


class DuetimeAsync1(_AsyncTask, bs.Duetime1):
    name = "duetime-async(1)"
    note = "as duetime(1), the task an async def (bench.ahit: an asyncio witness client per worker loop)"


class DuetimeAsync3(_AsyncTask, bs.Duetime3):
    name = "duetime-async(3)"
    note = "as duetime(3), the task an async def"


class DuetimeNoop1(_StampTask, bs.Duetime1):
    name = "noop-sync(1)"
    note = (
        "1 replica as duetime(1), the task a sync no-op (bench.stamp: notes its start in memory, "
        "no I/O; completion from duetime's stats counter, the notes sent to the witness after)"
    )


class DuetimeNoopAsync1(_AsyncStampTask, bs.Duetime1):
    name = "noop-async(1)"
    note = "as noop-sync(1), the task an async def that awaits nothing (bench.astamp)"


class DuetimeNoop3(_StampTask, bs.Duetime3):
    name = "noop-sync(3)"
    note = "3 replicas, as noop-sync(1)"


class DuetimeNoopAsync3(_AsyncStampTask, bs.Duetime3):
    name = "noop-async(3)"
    note = "3 replicas, as noop-async(1)"


class _Stamps:
    """What the scenarios ask of the witness, for the no-op pair: ``count`` is duetime's
    ``succeeded`` counter (in the Redis under test); ``records`` has every replica push
    its start notes to the witness (SIGUSR1, once) and reads them there."""

    def __init__(self, w, ad):
        self.w, self.ad, self.r, self._recs = w, ad, w.r, None
        self._sys = bs.redis.Redis.from_url(ad.url, decode_responses=True)

    def count(self):
        return int(self._sys.hget(f"duetime:{{{bs.NS}}}:stats", "succeeded") or 0)

    def wait_count(self, n, deadline_ms, poll=0.05):
        while bs.now_ms() < deadline_ms:
            if self.count() >= n:
                return True
            time.sleep(poll)
        return self.count() >= n

    def records(self):
        if self._recs is None:
            procs = [p for _, p, _ in self.ad.fleet.procs]
            for p in procs:
                os.kill(p.pid, signal.SIGUSR1)
            bs.wait_until(lambda: self.w.ready("dump:") >= len(procs), 30, "the replicas' notes")
            self._recs = self.w.records()
            self._sys.close()
        return self._recs


def _stamped(sc):
    def run(ad, w, p, sysr):
        return sc(ad, _Stamps(w, ad) if isinstance(ad, _StampTask) else w, p, sysr)

    return run


PAIRS = [  # (sync, async): their order alternates run by run
    (DuetimeNoop1, DuetimeNoopAsync1),
    (DuetimeNoop3, DuetimeNoopAsync3),
    (bs.Duetime1, DuetimeAsync1),
    (bs.Duetime3, DuetimeAsync3),
]
PEERS = [bs.ArqAdapter, bs.SaqAdapter]
ADAPTERS = [A for pair in PAIRS for A in pair] + PEERS
FIGURES = [  # key, label, format: the per-run spread printed under the table
    ("burst_jobs_s", "burst jobs/s", "{:,.0f}"),
    ("burst_procs_us_job", "burst worker CPU/job (us)", "{:.0f}"),
    ("burst_redis_us_job", "burst Redis CPU/job (us)", "{:.0f}"),
    ("lag_p50", "lag p50 (ms)", "{:.1f}"),
    ("lag_p99", "lag p99 (ms)", "{:.1f}"),
    ("lag_max", "lag max (ms)", "{:.1f}"),
]


def run_all(args, avail):
    """bench_shared.run_all, with each sync/async pair's order alternating run by run
    and the 1-minute load average noted before each scenario run."""
    p = bs.params(args.quick)
    w = bs.Witness()
    logdir = tempfile.mkdtemp(prefix="bench-async-logs-")
    raw, issues, extra = [], [], {"start_failed": {}, "logdir": logdir, "load": []}
    try:
        for run in range(1, args.runs + 1):
            order = [A for pair in PAIRS for A in (pair if run % 2 else pair[::-1])] + PEERS
            order = [A for A in order if A in ADAPTERS]
            for sc in bs.SCENARIOS:
                for A in order:
                    if avail[A.name] is not None:
                        continue
                    load = os.getloadavg()[0]
                    res = bs.one(A, sc, bs.plan(A, sc)[0], run, p, w, logdir, issues, raw, extra)
                    res["load1"] = load
                    extra["load"].append(load)
                    time.sleep(0.3)
    finally:
        w.close()
    return p, raw, issues, extra


def spreads(raw) -> list[str]:
    """Each figure per run (in run order) for every system: the run-to-run noise."""
    names = [A.name for A in ADAPTERS]
    lines = ["per run (run 1, 2, ...; the spread of a system's own runs is its noise):"]
    for key, label, fmt in FIGURES:
        for n in names:
            vals = [
                r[key] for r in raw if r["system"] == n and isinstance(r.get(key), (int, float))
            ]
            if vals:
                lo, hi = min(vals), max(vals)
                noise = f"  spread {(hi - lo) / statistics.median(vals) * 100:.0f}%"
                cells = ", ".join(fmt.format(v) for v in vals)
                lines.append(f"  {label:26s} {n:17s} {cells}{noise}")
    return lines


def shared(args) -> str:
    global ADAPTERS
    if args.noop_only:  # a confirmation run of duetime's own paths: no witness, no peers
        ADAPTERS = [A for pair in PAIRS[:2] for A in pair]
    bs.ADAPTERS = ADAPTERS
    bs.SCENARIOS = ["lag", "burst"]
    bs.sc_lag, bs.sc_burst = _stamped(bs.sc_lag), _stamped(bs.sc_burst)
    args.only = bs.SCENARIOS
    args.systems = [A.key() for A in ADAPTERS]
    avail = {A.name: A.unavailable() for A in ADAPTERS}
    info, cfg = bs.machine_info(), bs.redis_settings()
    p, raw, issues, extra = run_all(args, avail)
    extra["raw"] = raw
    med = bs.medians(raw)
    text = bs.render(info, p, med, avail, issues, extra, args, cfg)
    ratios = []
    for a, s in (
        ("noop-async(1)", "noop-sync(1)"),
        ("noop-async(3)", "noop-sync(3)"),
        ("duetime-async(1)", "duetime(1)"),
        ("duetime-async(3)", "duetime(3)"),
    ):
        for key in ("burst_jobs_s", "burst_procs_us_job", "lag_p99"):
            x, y = med.get(a, {}).get(key), med.get(s, {}).get(key)
            if x is not None and y:
                ratios.append(f"  {a} / {s} {key}: {x / y:.2f}")
    load = extra["load"]
    return "\n".join(
        [
            text,
            "",
            "async vs sync (medians):",
            *ratios,
            "",
            *spreads(raw),
            "",
            f"1-min load average before each scenario run: min {min(load):.2f}, median "
            f"{statistics.median(load):.2f}, max {max(load):.2f}",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller N / shorter windows (smoke run)")
    ap.add_argument("--runs", type=int, default=3, help="repeat each scenario, report the median")
    ap.add_argument("--only", choices=["inprocess", "shared"], help="run one half only")
    ap.add_argument(
        "--noop-only",
        action="store_true",
        help="shared: only the no-op pairs (duetime's sync and async paths, 1 and 3 replicas)",
    )
    args = ap.parse_args()
    out = []
    if args.only in (None, "inprocess"):
        out.append(in_process(args.runs, args.quick))
    if args.only in (None, "shared"):
        out.append(shared(args))
    print("\n\n".join(out), flush=True)


if __name__ == "__main__":
    main()
