#!/usr/bin/env python3
"""In-process benchmark: duetime JobScheduler vs sched, threading.Timer, APScheduler 3.x.

Not part of the test run. See tests/bench/README.md. Typical use:
    PYTHONPATH=/work/main /work/benchvenv/bin/python tests/bench/bench_inprocess.py --runs 3
"""

import argparse
import faulthandler
import gc
import itertools
import json
import logging
import os
import platform
import random
import sched
import shlex
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

mono, perf = time.monotonic, time.perf_counter
WORKERS = 4
GROWS_MS_PER_TICK = 0.1  # drift slope above this = error accumulates (0.5 ms/s, 30 ms/min)


def _noop():
    pass


# ----------------------------------------------------------------- adapters
class DuetimeAdapter:
    name, note = "duetime", "JobScheduler/RecurringJobScheduler, 4 workers"

    def start(self):
        from scheduler import JobScheduler

        self.s, self.r = JobScheduler(num_workers=WORKERS), None

    def schedule_at(self, fn, delay):
        self.s.schedule(fn, delay_seconds=delay)

    def every(self, fn, interval):
        from scheduler import RecurringJobScheduler

        self.s.shutdown(wait=True)  # idle here; keep only the recurring scheduler's threads
        self.s, self.r = None, RecurringJobScheduler(num_workers=WORKERS)
        t0 = mono()
        self.r.schedule("drift", fn, interval_seconds=interval)
        return t0

    def stop(self):
        for x in (self.s, self.r):
            if x is not None:
                x.shutdown(wait=True)


class SchedAdapter:
    name, note = "sched", "stdlib sched in 1 thread; jobs run inline in that thread"

    def start(self):
        self._wake, self._stopped = threading.Event(), False
        self.s = sched.scheduler(mono, self._delay)
        self.t = threading.Thread(target=self._loop, name="bench-sched", daemon=True)
        self.t.start()

    def _delay(self, secs):  # interruptible sleep so new, earlier events are noticed
        if secs > 0 and not self._stopped:
            self._wake.wait(secs)
            self._wake.clear()

    def _loop(self):
        while not self._stopped:
            self.s.run()  # returns when the queue is empty
            self._wake.wait(0.05)
            self._wake.clear()

    def schedule_at(self, fn, delay):
        self.s.enter(delay, 0, fn)
        self._wake.set()

    def every(self, fn, interval):  # usual recipe: re-enter from inside the job (at its start)
        def tick():
            if not self._stopped:
                self.s.enter(interval, 0, tick)
                fn()

        t0 = mono()
        self.schedule_at(tick, interval)
        return t0

    def stop(self):
        self._stopped = True
        for ev in list(self.s.queue):
            try:
                self.s.cancel(ev)
            except ValueError:
                pass
        self._wake.set()
        self.t.join(10)


class TimerAdapter:
    name, note = "Timer", "one threading.Timer (= one thread) per job; no worker pool"

    def start(self):
        self._timers, self._stopped = [], False

    def schedule_at(self, fn, delay):
        t = threading.Timer(delay, fn)
        t.daemon = True
        t.start()
        self._timers.append(t)

    def every(self, fn, interval):  # re-arm a new Timer from inside the job (at its start)
        def tick():
            if not self._stopped:
                self.schedule_at(tick, interval)
                fn()

        t0 = mono()
        self.schedule_at(tick, interval)
        return t0

    def stop(self):
        self._stopped = True
        for t in self._timers:
            t.cancel()
        deadline = mono() + 20
        for t in self._timers:
            t.join(max(0.0, deadline - mono()))


class APSAdapter:
    name, note = "APScheduler", "3.x BackgroundScheduler, MemoryJobStore, ThreadPoolExecutor(4)"

    def start(self):
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.jobstores.memory import MemoryJobStore
        from apscheduler.schedulers.background import BackgroundScheduler

        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        self.s = BackgroundScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": ThreadPoolExecutor(WORKERS)},
            job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
            timezone=timezone.utc,
        )
        self.s.start()

    def schedule_at(self, fn, delay):
        self.s.add_job(fn, "date", run_date=datetime.now(timezone.utc) + timedelta(seconds=delay))

    def every(self, fn, interval):
        t0, now = mono(), datetime.now(timezone.utc)
        self.s.add_job(
            fn, "interval", seconds=interval, start_date=now + timedelta(seconds=interval)
        )
        return t0

    def stop(self):
        self.s.shutdown(wait=True)


ADAPTERS = [DuetimeAdapter, SchedAdapter, TimerAdapter, APSAdapter]


def availability():
    """name -> None if usable, else the reason it is not."""
    out = {"sched": None, "Timer": None, "duetime": None, "APScheduler": None}
    for name, mod, attr in (
        ("duetime", "scheduler", "JobScheduler"),
        ("APScheduler", "apscheduler", "version_info"),
    ):
        try:
            getattr(__import__(mod), attr)
        except Exception as e:  # ImportError, missing class, or a broken package
            out[name] = f"{type(e).__name__}: {e}"
    return out


def stop_bounded(ad, timeout=30.0):
    """Stop an adapter in a helper thread; returns an error string if it hangs or raises."""
    err = []

    def run():
        try:
            ad.stop()
        except BaseException as e:
            err.append(f"stop() raised {type(e).__name__}: {e}")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return f"stop() did not return within {timeout:.0f}s"
    return err[0] if err else None


def pct(sorted_vals, p):
    return sorted_vals[max(0, min(len(sorted_vals) - 1, -(-len(sorted_vals) * p // 100) - 1))]


# ---------------------------------------------------------------- scenarios
def sc_lag(ad, n, spread):
    off = statistics.median(perf() - mono() for _ in range(5))  # perf_counter -> monotonic
    starts, due = [None] * n, [0.0] * n
    left, done = itertools.count(1), threading.Event()
    rng = random.Random(1234)
    delays = [rng.uniform(0, spread) for _ in range(n)]

    def job(i):
        starts[i] = perf()
        if next(left) == n:
            done.set()

    fns = [(lambda i=i: job(i)) for i in range(n)]
    for i in range(n):
        due[i] = mono() + delays[i]
        ad.schedule_at(fns[i], delays[i])
    done.wait(spread + 30)
    lags = sorted((s - off - d) * 1e3 for s, d in zip(starts, due) if s is not None)
    if not lags:
        return {"lag_missed": n}
    return {
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "lag_max": lags[-1],
        "lag_min": lags[0],
        "lag_missed": n - len(lags),
    }


def sc_burst(ad, n, lead):
    ends, left, done = [0.0], itertools.count(1), threading.Event()

    def job():
        if next(left) == n:
            ends[0] = perf()
            done.set()

    t_begin = mono()
    target = t_begin + lead  # the same absolute due time for every job
    first_due = None
    for _ in range(n):
        now = mono()
        delay = max(0.0, target - now)
        first_due = now + delay if first_due is None else min(first_due, now + delay)
        ad.schedule_at(job, delay)
    enq = mono() - t_begin
    done.wait(lead + 180)
    if not done.is_set():
        return {"burst_enqueue_s": enq, "burst_missed": n - (next(left) - 1)}
    return {
        "burst_jobs_s": n / (ends[0] - first_due),
        "burst_enqueue_s": enq,
        "burst_enqueue_late": enq > lead,
        "burst_missed": 0,
    }


def sc_idle(ad, n, window):
    for _ in range(n):
        ad.schedule_at(_noop, 3600.0)
    time.sleep(0.5)  # let the scheduler settle
    c0 = time.process_time()
    time.sleep(window)
    return {"idle_cpu": (time.process_time() - c0) * 20.0 / window}


def sc_drift(ad, duration, interval=0.2, body=0.05):
    starts = []

    def job():
        starts.append(mono())
        time.sleep(body)

    t0 = ad.every(job, interval)
    time.sleep(duration + interval / 2)
    snap = list(starts)
    if len(snap) < 3:
        return {"drift_ticks": len(snap)}
    ks = [round((s - t0) / interval) for s in snap]
    errs = [(s - (t0 + k * interval)) * 1e3 for s, k in zip(snap, ks)]
    mk, me = statistics.fmean(ks), statistics.fmean(errs)
    slope = sum((k - mk) * (e - me) for k, e in zip(ks, errs)) / (
        sum((k - mk) ** 2 for k in ks) or 1
    )
    return {
        "drift_max": max(abs(e) for e in errs),
        "drift_slope": slope,
        "drift_ticks": len(snap),
        "drift_expected": int(duration / interval),
    }


def mem_child(name, n):
    """Runs in a fresh interpreter: RSS growth for n pending jobs due in an hour."""
    try:
        import psutil

        rss = lambda: psutil.Process().memory_info().rss
    except ImportError:  # Linux fallback
        rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    ad = {a.name: a for a in ADAPTERS}[name]()
    ad.start()
    gc.collect()
    time.sleep(0.3)
    r0 = rss()
    for _ in range(n):
        ad.schedule_at(_noop, 3600.0)
    gc.collect()
    r1 = rss()
    print(json.dumps({"mem_mib_per_100k": (r1 - r0) / 2**20 * 100_000 / n}), flush=True)
    os._exit(0)  # skip tearing down 100k jobs


def sc_mem(name, n):
    cp = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--_mem-child", name, str(n)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if cp.returncode != 0 or not cp.stdout.strip():
        raise RuntimeError(
            f"mem child rc={cp.returncode}: {(cp.stderr.strip().splitlines() or [''])[-1]}"
        )
    return json.loads(cp.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------- driver
ROWS = [  # key, label, better ("low"/"high"/None = no ratio), format
    ("lag_p50", "lag p50 (ms)", "low", "{:.2f}"),
    ("lag_p99", "lag p99 (ms)", "low", "{:.2f}"),
    ("lag_max", "lag max (ms)", "low", "{:.2f}"),
    ("lag_min", "lag min (ms, <0 = early)", None, "{:.2f}"),
    ("lag_missed", "lag: jobs not run", None, "{:.0f}"),
    ("burst_jobs_s", "burst throughput (jobs/s)", "high", "{:,.0f}"),
    ("burst_enqueue_s", "burst: time to schedule all (s)", "low", "{:.3f}"),
    ("burst_missed", "burst: jobs not run", None, "{:.0f}"),
    ("idle_cpu", "idle CPU (CPU-s per 20 s)", "low", "{:.4f}"),
    ("drift_max", "drift max |err| (ms)", "low", "{:.2f}"),
    ("drift_slope", "drift slope (ms/tick)", None, "{:+.3f}"),
    ("drift_ticks", "drift ticks (expected)", None, "{:.0f}"),
    ("mem_mib_per_100k", "RSS growth per 100k pending (MiB)", "low", "{:.1f}"),
]


def machine_info():
    for m in ("apscheduler", "psutil"):
        try:
            __import__(m)
        except Exception:
            pass
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    vers = {m: getattr(sys.modules.get(m), "__version__", "n/a") for m in ("apscheduler", "psutil")}
    env = (
        f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if "PYTHONPATH" in os.environ else ""
    )
    return {
        "command": env + shlex.join([sys.executable] + sys.argv),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": f"{cpu} x {os.cpu_count()} logical",
        "versions": vers,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def run_all(args, avail):
    q = args.quick
    p = {
        "lag_n": 400 if q else 2000,
        "lag_spread": 2.0 if q else 5.0,
        "burst_n": 2000 if q else 20000,
        "burst_lead": 1.0 if q else 3.0,
        "idle_n": 1000,
        "idle_window": 3.0 if q else 20.0,
        "drift_s": 2.0 if q else 5.0,
        "mem_n": 20000 if q else 100000,
    }
    scenarios = {
        "lag": lambda ad: sc_lag(ad, p["lag_n"], p["lag_spread"]),
        "burst": lambda ad: sc_burst(ad, p["burst_n"], p["burst_lead"]),
        "idle": lambda ad: sc_idle(ad, p["idle_n"], p["idle_window"]),
        "drift": lambda ad: sc_drift(ad, p["drift_s"]),
    }
    raw = {a.name: [] for a in ADAPTERS}
    issues = []
    for run in range(args.runs):
        for sc_name, sc_fn in scenarios.items():
            if args.only and sc_name not in args.only:
                continue
            for A in ADAPTERS:
                if avail[A.name] is not None:
                    continue
                print(
                    f"  run {run + 1}/{args.runs} {sc_name:5s} {A.name} ...",
                    file=sys.stderr,
                    flush=True,
                )
                faulthandler.dump_traceback_later(600, exit=True)  # last-resort watchdog
                ad, res, started = A(), {}, False
                try:
                    ad.start()
                    started = True
                    res = sc_fn(ad)
                except Exception as e:
                    issues.append(f"{A.name} {sc_name} run {run + 1}: {type(e).__name__}: {e}")
                err = stop_bounded(ad) if started else None
                if err:
                    issues.append(f"{A.name} {sc_name} run {run + 1}: {err}")
                faulthandler.cancel_dump_traceback_later()
                res.update(scenario=sc_name, run=run + 1)
                raw[A.name].append(res)
                del ad
                gc.collect()
                time.sleep(0.5)
        if not args.only or "mem" in args.only:
            for A in ADAPTERS:
                if avail[A.name] is not None or A is TimerAdapter:  # 100k threads: not sensible
                    continue
                print(
                    f"  run {run + 1}/{args.runs} mem   {A.name} ...", file=sys.stderr, flush=True
                )
                try:
                    raw[A.name].append(
                        dict(sc_mem(A.name, p["mem_n"]), scenario="mem", run=run + 1)
                    )
                except Exception as e:
                    issues.append(f"{A.name} mem run {run + 1}: {type(e).__name__}: {e}")
    return p, raw, issues


def medians(raw):
    out = {}
    for name, runs in raw.items():
        keys = {k for r in runs for k, v in r.items() if isinstance(v, (int, float)) and k != "run"}
        out[name] = {
            k: statistics.median([r[k] for r in runs if isinstance(r.get(k), (int, float))])
            for k in keys
        }
        out[name]["burst_enqueue_late"] = any(r.get("burst_enqueue_late") for r in runs)
    return out


def ratio(better, dt, peer):
    if better is None or dt is None or peer is None or min(abs(dt), abs(peer)) < 1e-9:
        return ""
    r = peer / dt if better == "low" else dt / peer
    return f" (x{r:.2f})" if r > 0 else ""


def render(info, p, med, avail, issues, runs):
    names = [a.name for a in ADAPTERS]
    out = [
        "duetime in-process benchmark",
        f"command : {info['command']}",
        f"python  : {info['python']}   platform: {info['platform']}",
        f"cpu     : {info['cpu']}   apscheduler {info['versions']['apscheduler']}, "
        f"psutil {info['versions']['psutil']}   {info['date']}",
        f"params  : runs={runs} (median shown) " + " ".join(f"{k}={v}" for k, v in p.items()),
        "",
    ]
    rows = [["scenario"] + names]
    for key, label, better, fmt in ROWS:
        row = [label]
        dt = med.get("duetime", {}).get(key)
        for n in names:
            v = med.get(n, {}).get(key)
            if avail[n] is not None:
                cell = "n/a"
            elif v is None:
                cell = "-"
            else:
                cell = fmt.format(v) + ("" if n == "duetime" else ratio(better, dt, v))
                if key == "drift_ticks":
                    cell += f" ({med[n].get('drift_expected', 0):.0f})"
                if key == "drift_slope":
                    cell += " grows" if v > GROWS_MS_PER_TICK else " flat"
                if key == "burst_enqueue_s" and med[n].get("burst_enqueue_late"):
                    cell += " *"
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        out.append(
            "  ".join(
                c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))
            )
        )
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    out += [
        "",
        "(xR) = how many times better duetime is than that peer (>1: duetime better, <1: peer better);",
        "      lower-is-better rows use peer/duetime, throughput uses duetime/peer.",
        "*  = scheduling all burst jobs took longer than the lead time, so jobs started while still scheduling.",
        f"drift 'grows' = slope > {GROWS_MS_PER_TICK} ms/tick: the error accumulates instead of staying bounded.",
    ]
    out += [
        f"{a.name:12s}: {a.note}" + (f"  [n/a: {avail[a.name]}]" if avail[a.name] else "")
        for a in ADAPTERS
    ]
    out.append("Timer is skipped in the memory row (100k threads).")
    if issues:
        out += ["", "ISSUES:"] + [f"  - {i}" for i in issues]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller N / shorter windows (smoke run)")
    ap.add_argument(
        "--runs", type=int, default=3, help="repeat each scenario K times, report median"
    )
    ap.add_argument("--json", metavar="PATH", help="dump raw and median results as JSON")
    ap.add_argument(
        "--only",
        nargs="+",
        choices=["lag", "burst", "idle", "drift", "mem"],
        help="run only these scenarios",
    )
    ap.add_argument("--_mem-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._mem_child:
        return mem_child(args._mem_child[0], int(args._mem_child[1]))
    info, avail = machine_info(), availability()
    p, raw, issues = run_all(args, avail)
    med = medians(raw)
    text = render(info, p, med, avail, issues, args.runs)
    print(text, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "info": info,
                    "params": p,
                    "availability": avail,
                    "raw": raw,
                    "median": med,
                    "issues": issues,
                },
                f,
                indent=2,
                default=str,
            )
    leftover = [
        t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon
    ]
    if leftover:
        print(
            f"WARNING: {len(leftover)} non-daemon threads still alive, forcing exit: {leftover[:5]}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)


if __name__ == "__main__":
    main()
