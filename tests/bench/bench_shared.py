#!/usr/bin/env python3
"""Shared-mode benchmark: duetime replicas over Redis vs APScheduler 3, RQ, arq, huey, saq.

Not part of the test run. See tests/bench/README.md. Typical use:
    PYTHONPATH=/work/main /work/benchvenv/bin/python tests/bench/bench_shared.py --runs 3
"""

import argparse
import asyncio
import atexit
import collections
import faulthandler
import importlib.metadata
import json
import logging
import math
import os
import platform
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))
SNAPSHOT = {"dir": None, "head": "?", "dirty": False}


def _git(*args):
    try:
        return subprocess.run(
            ["git", "-C", CHECKOUT, *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except Exception:
        return "?"


def _take_snapshot():
    """Copy duetime's code (scheduler/, workers/, lua/) aside once, so every replica and
    the producer of this run use the same code even if the checkout changes meanwhile."""
    import shutil

    snap = tempfile.mkdtemp(prefix="bench-shared-duetime-")
    for d in ("scheduler", "workers", "lua"):
        if os.path.isdir(os.path.join(CHECKOUT, d)):
            shutil.copytree(
                os.path.join(CHECKOUT, d),
                os.path.join(snap, d),
                ignore=shutil.ignore_patterns("__pycache__"),
            )
    SNAPSHOT.update(
        dir=snap,
        head=_git("rev-parse", "--short", "HEAD"),
        dirty=bool(_git("status", "--porcelain", "--", "scheduler", "workers", "lua")),
    )
    return snap


ROOT = CHECKOUT
if __name__ == "__main__" and "--no-snapshot" not in sys.argv:
    ROOT = _take_snapshot()
else:
    SNAPSHOT["head"] = _git("rev-parse", "--short", "HEAD")
for _p in (ROOT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import redis  # noqa: E402
import shared_tasks  # noqa: E402  (registers duetime's "bench.hit")

from scheduler.embedded import EmbeddedRedis  # noqa: E402

WORKERS = 4  # worker threads / jobs at a time of every system
NS = "bench"  # duetime namespace
RUNNER = "import shared_tasks; shared_tasks.main()"
perf = time.perf_counter
now_ms = lambda: time.time() * 1000
_UTC = timezone.utc
_LIVE_PROCS: set = set()  # every child we started, for the emergency cleanup
_LIVE_SERVERS: set = set()  # every redis-server we started


def _dt(ms):
    return datetime.fromtimestamp(ms / 1000, _UTC)


# ------------------------------------------------------------ processes, cleanup
def _killpg(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader and anything it forked
    except (ProcessLookupError, PermissionError):
        pass


def emergency_cleanup():
    for p in list(_LIVE_PROCS):
        _killpg(p)
    for s in list(_LIVE_SERVERS):
        try:
            s.stop(timeout=1)
        except Exception:
            pass


atexit.register(emergency_cleanup)
if SNAPSHOT["dir"]:
    atexit.register(lambda: __import__("shutil").rmtree(SNAPSHOT["dir"], ignore_errors=True))


class Watchdog:
    """Last resort: a scenario that exceeds its budget dumps every thread's stack, kills
    all children and redis-servers, and ends the process (exit 3)."""

    def __init__(self):
        self._deadline, self._label = None, ""
        threading.Thread(target=self._loop, name="bench-watchdog", daemon=True).start()

    def arm(self, seconds, label):
        self._deadline, self._label = time.monotonic() + seconds, label

    def disarm(self):
        self._deadline = None

    def _loop(self):
        while True:
            time.sleep(1)
            d = self._deadline
            if d is not None and time.monotonic() > d:
                print(
                    f"\nWATCHDOG: {self._label} exceeded its time budget; aborting",
                    file=sys.stderr,
                    flush=True,
                )
                faulthandler.dump_traceback(all_threads=True)
                emergency_cleanup()
                os._exit(3)


class Fleet:
    """The child processes of one system in one scenario run, each in its own session
    (so a stop can kill what it forked: rq work horses, pool members)."""

    def __init__(self, name, logdir):
        self.name, self.logdir, self.procs = name, logdir, []
        self.tag = ""  # scenario/run, part of the log file names

    def spawn(self, label, argv, env_extra):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [HERE, ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        env.update(env_extra)
        path = os.path.join(self.logdir, f"{self.name}{self.tag}-{label}-{len(self.procs)}.log")
        with open(path, "ab") as out:
            p = subprocess.Popen(
                argv,
                env=env,
                cwd=HERE,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _LIVE_PROCS.add(p)
        self.procs.append((label, p, path))
        return p

    def cpu(self):
        """CPU seconds (user + system) used so far by the processes started (leaders only)."""
        tot = 0.0
        for _label, p, _path in self.procs:
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                tot += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass
        return tot

    def died(self):
        return [
            (label, p.returncode, path) for label, p, path in self.procs if p.poll() is not None
        ]

    def stop(self, timeout=20.0, sig=signal.SIGTERM):
        """Signal every leader, wait up to ``timeout`` s, then SIGKILL every process group.
        Returns problems (a process that ignored the signal)."""
        problems = []
        for _, p, _ in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for label, p, _ in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(
                    f"{self.name} {label} (pid {p.pid}) did not exit within {timeout:.0f}s of "
                    f"{signal.Signals(sig).name}; killed"
                )
        for _, p, _ in self.procs:
            _killpg(p)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                problems.append(f"{self.name} pid {p.pid} survived SIGKILL")
            _LIVE_PROCS.discard(p)
        return problems

    def logs(self):
        return [path for _, _, path in self.procs]


LOG_BAD = re.compile(r"Traceback|Exception|Error\b|ERROR|WARNING|CRITICAL|lost|exceeded", re.I)
LOG_EXPECTED = re.compile(
    r"has AOF off"
)  # duetime's startup warning: we run Redis with appendonly=False on purpose


def scan_logs(paths, limit=4):
    """(number of suspicious lines, a few distinct samples) over the given log files."""
    n, samples = 0, []
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            if LOG_BAD.search(line) and not LOG_EXPECTED.search(line):
                n += 1
                short = re.sub(r"^\S+ \S+ ", "", line.strip())[:200]
                if short not in samples and len(samples) < limit:
                    samples.append(short)
    return n, samples


def tail(path, lines=8):
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().splitlines()[-lines:])
    except OSError:
        return ""


# ---------------------------------------------------------------------- witness
class Witness:
    """A separate redis-server the tasks append their records to (see shared_tasks)."""

    def __init__(self):
        self.server = EmbeddedRedis(appendonly=False).start()
        _LIVE_SERVERS.add(self.server)
        self.r = redis.Redis.from_url(self.server.url, decode_responses=True)
        os.environ["BENCH_WITNESS_URL"] = self.server.url  # children and in-process APScheduler

    def reset(self):
        self.r.flushall()

    def count(self):
        return self.r.llen(shared_tasks.HITS)

    def ready(self, prefix):
        return sum(1 for x in self.r.lrange(shared_tasks.READY, 0, -1) if x.startswith(prefix))

    def records(self):
        out = []
        for line in self.r.lrange(shared_tasks.HITS, 0, -1):
            tag, due, start, pid, sched = line.split("|")
            out.append((tag, float(due), float(start), int(pid), float(sched)))
        return out

    def wait_count(self, n, deadline_ms, poll=0.2):
        while now_ms() < deadline_ms:
            if self.count() >= n:
                return True
            time.sleep(poll)
        return self.count() >= n

    def close(self):
        self.server.stop()
        _LIVE_SERVERS.discard(self.server)


def wait_until(pred, timeout, what, fleet=None, poll=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if fleet is not None and fleet.died():
            label, rc, path = fleet.died()[0]
            raise RuntimeError(
                f"{label} exited with status {rc} while waiting for {what}: {tail(path)}"
            )
        time.sleep(poll)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


# --------------------------------------------------------------------- adapters
class Adapter:
    """``start(url, procs, cron)`` starts ``procs`` scheduler/worker processes against a
    private Redis (0 = producer only, for the memory row); ``enqueue_at(due_ms, tag)``
    stores a one-off job; ``enqueue_every(interval, anchor)`` a recurring one (cron-style
    peers configure it at start when ``cron`` is set); ``stop()`` returns problems."""

    name = note = ""
    modules: tuple = ()
    multi = False  # several scheduler processes may share one Redis without doubling
    every = True  # supports a 1 s recurring job
    in_process = False  # runs inside the benchmark process

    def __init__(self, logdir, witness):
        self.logdir, self.w, self.fleet = logdir, witness, Fleet(self.key(), logdir)
        self.nprocs = 0

    @classmethod
    def key(cls):
        return re.sub(r"\W", "", cls.name.lower())

    @classmethod
    def unavailable(cls):
        for m in cls.modules:
            try:
                __import__(m)
            except Exception as e:
                return f"{type(e).__name__}: {e}"
        return None

    def enqueue_many(self, items):
        for due, tag in items:
            self.enqueue_at(due, tag)

    def enqueue_every(self, interval, anchor_s):
        pass

    def env(self, url, cron):
        return {
            "BENCH_REDIS_URL": url,
            "BENCH_CRON": "1" if cron else "0",
            "BENCH_WORKERS": str(WORKERS),
        }

    def logs(self):
        return self.fleet.logs()

    def stop(self):
        return self.fleet.stop()


class DuetimeAdapter(Adapter):
    modules = ("scheduler", "redis", "click")
    multi = True
    replicas = 1

    def start(self, url, procs=None, cron=False):
        from scheduler import Client

        self.url, self.recurring = url, False
        self.client = Client(url, namespace=NS)
        self.nprocs = self.replicas if procs is None else procs
        argv = [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--redis",
            url,
            "--namespace",
            NS,
            "--import",
            "shared_tasks",
            "--workers",
            str(WORKERS),
            "--lease",
            "30",
            "--resync",
            "5",
            "--log-level",
            "WARNING",
        ]
        for _ in range(self.nprocs):
            self.fleet.spawn("replica", argv, self.env(url, cron))
        if self.nprocs:
            r = redis.Redis.from_url(url)
            pattern = f"duetime:{{{NS}}}:replica:*"
            wait_until(
                lambda: len(r.keys(pattern)) >= self.nprocs,
                30,
                f"{self.nprocs} duetime replica key(s)",
                self.fleet,
            )
            r.close()

    def enqueue_at(self, due_ms, tag):
        self.client.enqueue(
            "bench.hit", kwargs={"due_ms": int(due_ms), "tag": tag}, at=due_ms / 1000
        )

    def enqueue_every(self, interval, anchor_s):
        self.recurring = True
        self.client.enqueue(
            "bench.hit",
            every=interval,
            anchor=anchor_s,
            job_id="tick",
            kwargs={"due_ms": 0, "tag": "tick"},
        )

    def diagnose(self):
        """The tick job's state, recent events and the replicas' keys, for the report."""
        try:
            info = self.client.get("tick")
            ev = [
                (
                    round(e.at % 1000, 3),
                    e.kind,
                    e.scheduled and round(e.scheduled % 1000, 3),
                    e.detail[:40],
                )
                for e in self.client.events(12)
            ]
            r = redis.Redis.from_url(self.url, decode_responses=True)
            reps = {k: r.pttl(k) for k in r.keys(f"duetime:{{{NS}}}:replica:*")}
            due = r.zrange(f"duetime:{{{NS}}}:due:default", 0, 3, withscores=True)
            r.close()
            return (
                f"now%1000={time.time() % 1000:.3f} next_run%1000={info.next_run and info.next_run % 1000} "
                f"runs={info.runs} state={info.state} due-head={due} replicas(pttl)={reps} events={ev}"
            )
        except Exception as e:
            return f"(diagnosis failed: {type(e).__name__}: {e})"

    def store_stats(self):
        r = redis.Redis.from_url(self.url, decode_responses=True)
        try:
            return r.hgetall(f"duetime:{{{NS}}}:stats")
        finally:
            r.close()

    def stop(self):
        problems = []
        try:
            if self.recurring:
                self.client.cancel("tick")
            self.client.close()
        except Exception as e:
            problems.append(f"client close: {type(e).__name__}: {e}")
        return problems + self.fleet.stop(timeout=40)  # replicas drain up to --shutdown-timeout 30


class Duetime1(DuetimeAdapter):
    name, replicas = "duetime(1)", 1
    note = "1 replica: python -m scheduler run --workers 4 --lease 30 --resync 5; producer: Client.enqueue(at=...)"


class Duetime3(DuetimeAdapter):
    name, replicas = "duetime(3)", 3
    note = "3 replicas as above (12 workers on 2 cores)"


class APSAdapter(Adapter):
    name, modules, in_process = "APScheduler", ("apscheduler", "redis"), True
    note = (
        "3.x BackgroundScheduler + RedisJobStore + ThreadPoolExecutor(4), misfire_grace_time=None, "
        "in the benchmark process (add_job wakes only its own scheduler)"
    )

    def start(self, url, procs=1, cron=False):
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.jobstores.redis import RedisJobStore
        from apscheduler.schedulers.background import BackgroundScheduler

        self.messages = []
        log = logging.getLogger("apscheduler")
        log.setLevel(logging.WARNING)
        log.propagate = False
        self.handler = _ListHandler(self.messages)
        log.addHandler(self.handler)
        u = urlsplit(url)
        self.s = BackgroundScheduler(
            jobstores={"default": RedisJobStore(host=u.hostname, port=u.port, db=0)},
            executors={"default": ThreadPoolExecutor(WORKERS)},
            job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
            timezone=_UTC,
        )
        self.nprocs = 1 if procs else 0
        self.s.start(paused=not procs)

    def enqueue_at(self, due_ms, tag):
        self.s.add_job(shared_tasks.aps_hit, "date", run_date=_dt(due_ms), args=[int(due_ms), tag])

    def enqueue_every(self, interval, anchor_s):
        first = anchor_s + interval * math.ceil((time.time() + 0.5 - anchor_s) / interval)
        self.s.add_job(
            shared_tasks.aps_hit,
            "interval",
            seconds=interval,
            start_date=_dt(first * 1000),
            args=[0, "tick"],
            id="tick",
        )

    def stop(self):
        problems = [f"APScheduler log: {m}" for m in self.messages[:3]]
        err = run_bounded(lambda: self.s.shutdown(wait=True), 30)
        if err:
            problems.append(f"APScheduler shutdown: {err}")
        logging.getLogger("apscheduler").removeHandler(self.handler)
        return problems


class _ListHandler(logging.Handler):
    def __init__(self, sink):
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record):
        self.sink.append(record.getMessage()[:200])


class RQAdapter(Adapter):
    name, modules = "RQ", ("rq", "redis")
    every = True
    note = (
        "rq worker-pool -n 4 -w rq.SimpleWorker (no fork per job; the default forking Worker ran ~30 "
        "jobs/s here), built-in scheduler polls every 1 s; Queue.enqueue_at; "
        "recurring: one `rq cron` process (cron '* * * * * *'; rq cron has no cross-process dedup)"
    )

    def start(self, url, procs=1, cron=False):
        from rq import Queue

        self.conn = redis.Redis.from_url(url)
        self.q = Queue("default", connection=self.conn)
        self.nprocs = WORKERS if procs else 0
        if procs:
            self.fleet.spawn(
                "pool",
                [
                    sys.executable,
                    "-m",
                    "rq.cli",
                    "worker-pool",
                    "-u",
                    url,
                    "-n",
                    str(WORKERS),
                    "-w",
                    "rq.SimpleWorker",
                    "-l",
                    "WARNING",
                    "default",
                ],
                self.env(url, cron),
            )
            wait_until(
                lambda: self.conn.scard("rq:workers") >= WORKERS, 30, "rq workers", self.fleet
            )
            if cron:
                self.fleet.spawn(
                    "cron", [sys.executable, "-c", RUNNER, "rq-cron"], self.env(url, cron)
                )
                wait_until(lambda: self.w.ready("rq-cron") >= 1, 30, "rq cron", self.fleet)

    def enqueue_at(self, due_ms, tag):
        self.q.enqueue_at(_dt(due_ms), shared_tasks.rq_hit, int(due_ms), tag)

    def stop(self):
        problems = self.fleet.stop(timeout=20)
        self.conn.close()
        return problems


class _AsyncAdapter(Adapter):
    """An asyncio producer driven from this (sync) thread by its own event loop."""

    def enqueue_at(self, due_ms, tag):
        self.enqueue_many([(due_ms, tag)])

    def enqueue_many(self, items):
        async def go():
            for due, tag in items:
                await self._enqueue(due, tag)

        self.loop.run_until_complete(go())

    def _spawn_workers(self, url, procs, cron, system):
        self.nprocs = procs
        for _ in range(procs):
            self.fleet.spawn("worker", [sys.executable, "-c", RUNNER, system], self.env(url, cron))
        if procs:
            wait_until(
                lambda: self.w.ready(system + ":") >= procs, 30, f"{system} workers", self.fleet
            )


class ArqAdapter(_AsyncAdapter):
    name, modules, multi = "arq", ("arq", "redis"), True
    note = (
        "arq worker, max_jobs=4, default poll_delay 0.5 s; enqueue_job(_defer_until=); recurring: "
        "cron(second=every, microsecond=0, unique=True) in every worker (job id per tick)"
    )

    def start(self, url, procs=1, cron=False):
        from arq import create_pool
        from arq.connections import RedisSettings

        self.loop = asyncio.new_event_loop()
        self.pool = self.loop.run_until_complete(create_pool(RedisSettings.from_dsn(url)))
        self._spawn_workers(url, procs, cron, "arq")

    async def _enqueue(self, due, tag):
        await self.pool.enqueue_job("arq_hit", int(due), tag, _defer_until=_dt(due))

    def stop(self):
        problems = self.fleet.stop(timeout=20)
        try:
            self.loop.run_until_complete(self.pool.aclose())
        finally:
            self.loop.close()
        return problems


class HueyAdapter(Adapter):
    name, modules, every = "huey", ("huey", "redis"), False
    note = (
        "RedisHuey, consumer -w 4 -k thread (scheduler checks every 1 s); task.schedule(eta=); "
        "no recurring row: periodic tasks have 1-minute resolution"
    )

    def start(self, url, procs=1, cron=False):
        self.h, self.task = shared_tasks.make_huey(url)
        self.nprocs = procs
        for _ in range(procs):
            self.fleet.spawn(
                "consumer", [sys.executable, "-c", RUNNER, "huey"], self.env(url, cron)
            )
        if procs:
            wait_until(lambda: self.w.ready("huey") >= procs, 30, "huey consumer", self.fleet)
            time.sleep(0.5)  # the marker is written just before consumer.run()

    def enqueue_at(self, due_ms, tag):
        self.task.schedule(args=(int(due_ms), tag), eta=_dt(due_ms))

    def stop(self):
        problems = self.fleet.stop(timeout=20)
        try:
            self.h.storage.conn.close()
        except Exception:
            pass
        return problems


class SaqAdapter(_AsyncAdapter):
    name, modules, multi = "saq", ("saq", "redis"), True
    note = (
        "saq Worker(concurrency=4), schedule timer 1 s; Queue.enqueue(scheduled=epoch s); recurring: "
        "CronJob('* * * * * *') in every worker (unique key)"
    )

    def start(self, url, procs=1, cron=False):
        from saq import Queue

        self.loop = asyncio.new_event_loop()
        self.q = Queue.from_url(url)
        self.loop.run_until_complete(self.q.connect())
        self._spawn_workers(url, procs, cron, "saq")

    async def _enqueue(self, due, tag):
        await self.q.enqueue("saq_hit", scheduled=due / 1000, due_ms=int(due), tag=tag)

    def stop(self):
        problems = self.fleet.stop(timeout=20)
        try:
            self.loop.run_until_complete(self.q.disconnect())
        finally:
            self.loop.close()
        return problems


ADAPTERS = [Duetime1, Duetime3, APSAdapter, RQAdapter, ArqAdapter, HueyAdapter, SaqAdapter]
ALIASES = {
    "duetime": ["duetime1", "duetime3"],
    "aps": ["apscheduler"],
    "apscheduler3": ["apscheduler"],
}


def run_bounded(fn, timeout):
    """Run ``fn`` in a helper thread; an error string if it raises or hangs."""
    err = []

    def run():
        try:
            fn()
        except BaseException as e:
            err.append(f"{type(e).__name__}: {e}")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return f"did not return within {timeout:.0f}s"
    return err[0] if err else None


def pct(vals, p):
    return vals[max(0, min(len(vals) - 1, -(-len(vals) * p // 100) - 1))]


# ---------------------------------------------------------------------- scenarios
def calibrate(ad, n=200):
    """Seconds per enqueue call (jobs due in 2 h; they stay pending, harmlessly)."""
    base = now_ms() + 7_200_000
    t = perf()
    ad.enqueue_many([(base + i, "cal") for i in range(n)])
    return (perf() - t) / n


def first_starts(recs, prefix):
    """tag -> (first start, due) for records whose tag starts with ``prefix``; and the
    number of duplicate records."""
    first, dups = {}, 0
    for tag, due, start, _pid, _sched in recs:
        if not tag.startswith(prefix):
            continue
        if tag in first:
            dups += 1
            if start < first[tag][0]:
                first[tag] = (start, due)
        else:
            first[tag] = (start, due)
    return first, dups


def sc_lag(ad, w, p, sysr):
    n, spread = p["lag_n"], p["lag_spread"]
    cost = calibrate(ad)
    offset = max(2.0, 1.0 + 1.5 * n * cost)  # all enqueued before the first is due
    rng = random.Random(1234)
    delays = [rng.uniform(0, spread) for _ in range(n)]
    t0 = now_ms() + offset * 1000
    items = [(round(t0 + d * 1000), f"L{i}") for i, d in enumerate(delays)]
    t = perf()
    ad.enqueue_many(items)
    enq = perf() - t
    late = now_ms() > min(d for d, _ in items)
    w.wait_count(n, max(d for d, _ in items) + p["lag_wait"] * 1000)
    time.sleep(1.0)  # late duplicates
    first, dups = first_starts(w.records(), "L")
    lags = sorted(s - d for s, d in first.values())
    res = {
        "lag_missed": n - len(first),
        "lag_dups": dups,
        "enq_us": enq / n * 1e6,
        "lag_enq_late": late,
    }
    if lags:
        res.update(lag_p50=pct(lags, 50), lag_p99=pct(lags, 99), lag_max=lags[-1], lag_min=lags[0])
    return res


def sc_burst(ad, w, p, sysr):
    n = p["burst_n"]
    cost = calibrate(ad)
    lead = max(p["burst_lead"], 1.0 + 1.5 * n * cost)
    due = round(now_ms() + lead * 1000)
    t = perf()
    ad.enqueue_many([(due, f"B{i}") for i in range(n)])
    enq = perf() - t
    late = now_ms() > due
    cpu0, s0, pc0, wc0 = _redis_cpu(sysr), _cmdusec(sysr), ad.fleet.cpu(), _redis_cpu(w.r)
    complete = w.wait_count(n, due + p["burst_timeout"] * 1000)
    cpu1, s1, pc1, wc1 = _redis_cpu(sysr), _cmdusec(sysr), ad.fleet.cpu(), _redis_cpu(w.r)
    time.sleep(1.0)
    first, dups = first_starts(w.records(), "B")
    res = {
        "burst_enqueue_s": enq,
        "burst_enq_late": late,
        "burst_missed": n - len(first),
        "burst_dups": dups,
        "burst_partial": not complete,
        "burst_redis_us_job": (cpu1 - cpu0) * 1e6 / n,
        "burst_witness_us_job": (wc1 - wc0) * 1e6 / n,
    }
    if ad.fleet.procs:  # worker/replica processes (not in-process APScheduler)
        res["burst_procs_us_job"] = (pc1 - pc0) * 1e6 / n
    # Redis time per job, by command (EVALSHA's usec includes the commands its script runs)
    delta = {k: (v[0] - s0.get(k, (0, 0))[0], v[1] - s0.get(k, (0, 0))[1]) for k, v in s1.items()}
    res["burst_breakdown"] = {
        k: f"{c / n:.2f} calls {u / n:.1f} us"
        for k, (c, u) in sorted(delta.items(), key=lambda kv: -kv[1][1])
        if c > 0 and k != "info"
    }
    if first:
        last = max(s for s, _ in first.values())
        res["burst_jobs_s"] = len(first) / max(1e-3, (last - due) / 1000)
        res["burst_early"] = min(s for s, _ in first.values()) - due  # < 0: started before due
    return res


def _cmdstats(r):
    out = {}
    for k, v in r.info("commandstats").items():
        out[k.replace("cmdstat_", "")] = v["calls"] if isinstance(v, dict) else v
    return out


def _cmdusec(r):
    """command -> (calls, usec) from INFO commandstats."""
    return {
        k.replace("cmdstat_", ""): (v["calls"], v["usec"])
        for k, v in r.info("commandstats").items()
        if isinstance(v, dict)
    }


def _redis_cpu(r):
    """The Redis server's CPU seconds so far (user + system, all its threads)."""
    c = r.info("cpu")
    return float(c["used_cpu_user"]) + float(c["used_cpu_sys"])


def sc_idle(ad, w, p, sysr):
    base = now_ms() + 3_600_000
    ad.enqueue_many([(base + i * 3, "I") for i in range(p["idle_n"])])
    time.sleep(p["idle_settle"])
    c0 = sysr.info("stats")["total_commands_processed"]  # A (not counted in itself)
    s0 = _cmdstats(sysr)  # B
    t = perf()
    time.sleep(p["idle_window"])
    c1 = sysr.info("stats")["total_commands_processed"]  # C: counts A and B
    el = perf() - t
    s1 = _cmdstats(sysr)
    total = (c1 - c0 - 2) / el
    delta = {k: v - s0.get(k, 0) for k, v in s1.items() if v - s0.get(k, 0) > 0}
    delta["info"] = delta.get("info", 0) - 2  # B..C window: B and C are ours
    delta = {k: round(v / el, 2) for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v > 0}
    return {
        "idle_cmds_s": total,
        "idle_cmds_s_proc": total / max(1, ad.nprocs),
        "idle_breakdown": delta,
    }


def sc_recurring(ad, w, p, sysr, procs):
    ticks = p["rec_ticks"]
    anchor = math.floor(time.time()) - 10
    ad.enqueue_every(1.0, anchor)
    w0 = (math.ceil(time.time()) + 2) * 1000  # window of `ticks` whole seconds
    end = w0 + ticks * 1000 + 2500
    while now_ms() < end:
        time.sleep(min(0.5, max(0.01, (end - now_ms()) / 1000)))
    counts, first = collections.Counter(), {}
    for tag, _due, start, _pid, sched in w.records():
        if tag != "tick":
            continue
        tid = sched if sched >= 0 else math.floor(start / 1000) * 1000
        if w0 <= tid < w0 + ticks * 1000:
            counts[tid] += 1
            first[tid] = min(first.get(tid, start), start)
    grid = [w0 + k * 1000 for k in range(ticks)]
    lags = sorted(first[g] - g for g in grid if g in first)
    k = f"rec{procs}"
    res = {
        f"{k}_dup": sum(c - 1 for c in counts.values()),
        f"{k}_missed": sum(1 for g in grid if g not in counts),
        f"{k}_offgrid": sum(1 for t in counts if t not in set(grid)),
    }
    if lags:
        res[f"{k}_lag_p50"], res[f"{k}_lag_max"] = pct(lags, 50), lags[-1]
    return res


def sc_mem(ad, w, p, sysr):
    ad.enqueue_at(now_ms() + 3_600_000, "M")  # warm up: scripts loaded, structures created
    time.sleep(0.3)
    m0 = sysr.info("memory")["used_memory"]
    n = p["mem_n"]
    base = now_ms() + 3_600_000
    t = perf()
    chunk = 5000
    for i in range(0, n, chunk):
        ad.enqueue_many([(base + j * 7, "M") for j in range(i, min(n, i + chunk))])
    enq = perf() - t
    time.sleep(0.3)
    m1 = sysr.info("memory")["used_memory"]
    res = {"mem_bytes_job": (m1 - m0) / n, "mem_enq_us": enq / n * 1e6, "mem_keys": sysr.dbsize()}
    if isinstance(ad, DuetimeAdapter):  # where the bytes go
        detail, sample = {}, None
        for k in sysr.scan_iter(count=1000):
            kind = re.sub(r"^duetime:\{[^}]*\}:", "", k).split(":")[0]
            if kind == "job":
                sample = sample or k
                continue
            detail[kind] = (
                f"{sysr.memory_usage(k, samples=0) / n:.0f} B/job ({sysr.object('encoding', k)})"
            )
        if sample:
            h = sysr.hgetall(sample)
            detail["job hash"] = (
                f"{sysr.memory_usage(sample, samples=0)} B ({sysr.object('encoding', sample)}, "
                f"{len(h)} fields, longest value {max(map(len, h.values()))} B)"
            )
        res["mem_detail"] = detail
    return res


# ------------------------------------------------------------------------ driver
ROWS = [  # key, label, better ("low"/"high"/None), format
    ("lag_p50", "lag p50 (ms)", "low", "{:.1f}"),
    ("lag_p99", "lag p99 (ms)", "low", "{:.1f}"),
    ("lag_max", "lag max (ms)", "low", "{:.1f}"),
    ("lag_min", "lag min (ms; <0 = ran early)", None, "{:.1f}"),
    ("lag_missed", "lag: jobs never run", None, "{:.0f}"),
    ("lag_dups", "lag: duplicate runs", None, "{:.0f}"),
    ("enq_us", "enqueue cost (us/job, 1 producer)", "low", "{:,.0f}"),
    ("burst_jobs_s", "burst throughput (jobs/s)", "high", "{:,.0f}"),
    ("burst_missed", "burst: not run within timeout", None, "{:.0f}"),
    ("burst_dups", "burst: duplicate runs", None, "{:.0f}"),
    ("burst_enqueue_s", "burst: time to enqueue all (s)", "low", "{:.1f}"),
    ("burst_redis_us_job", "burst: Redis CPU per job (us)", "low", "{:.1f}"),
    ("burst_procs_us_job", "burst: worker processes' CPU per job (us)", "low", "{:.0f}"),
    ("burst_witness_us_job", "burst: witness Redis CPU per job (us)", None, "{:.1f}"),
    ("idle_cmds_s", "idle Redis cmds/s (all procs)", "low", "{:.1f}"),
    ("idle_cmds_s_proc", "idle Redis cmds/s per process", "low", "{:.1f}"),
    ("rec1", "recurring 1 proc: dup/missed", None, None),
    ("rec1_lag", "recurring 1 proc: tick lag p50/max", None, None),
    ("rec2", "recurring 2 procs: dup/missed", None, None),
    ("rec2_lag", "recurring 2 procs: tick lag p50/max", None, None),
    ("rec3", "recurring 3 procs: dup/missed", None, None),
    ("rec3_lag", "recurring 3 procs: tick lag p50/max", None, None),
    ("mem_bytes_job", "Redis memory per pending job (B)", "low", "{:,.0f}"),
]
SCENARIOS = ["lag", "burst", "idle", "recurring", "mem"]


def params(quick):
    return {
        "lag_n": 400 if quick else 2000,
        "lag_spread": 2.0 if quick else 5.0,
        "lag_wait": 15 if quick else 30,
        "burst_n": 2000 if quick else 20000,
        "burst_lead": 2.0 if quick else 3.0,
        "burst_timeout": 30 if quick else 120,
        "idle_n": 1000,
        "idle_settle": 3.0,
        "idle_window": 5.0 if quick else 20.0,
        "rec_ticks": 6 if quick else 20,
        "mem_n": 20000 if quick else 100000,
    }


def plan(A, scenario):
    """The process counts a system runs a scenario with ([] = not applicable)."""
    if scenario == "recurring":
        if not A.every:
            return []
        if issubclass(A, DuetimeAdapter):
            return [1] if A.replicas == 1 else [2, 3]
        return [1, 2, 3] if A.multi else [1]
    if scenario == "mem":
        return [] if A is Duetime3 else [0]  # replicas play no part: measured once
    return [A.replicas if issubclass(A, DuetimeAdapter) else 1]


def one(A, scenario, procs, run, p, w, logdir, issues, raw, extra):
    fns = {"lag": sc_lag, "burst": sc_burst, "idle": sc_idle, "mem": sc_mem}
    label = (
        f"{A.name} {scenario}"
        + (f" {procs} procs" if scenario == "recurring" else "")
        + f" run {run}"
    )
    print(f"  {label} ...", file=sys.stderr, flush=True)
    wd.arm(900, label)
    w.reset()
    server = EmbeddedRedis(appendonly=False).start()
    _LIVE_SERVERS.add(server)
    sysr = redis.Redis.from_url(server.url, decode_responses=True)
    ad, res, started, t0 = A(logdir, w), {}, False, perf()
    ad.fleet.tag = f"-{scenario}-p{procs}-r{run}"
    try:
        ad.start(server.url, procs, cron=(scenario == "recurring"))
        started = True
        if scenario == "recurring":
            res = sc_recurring(ad, w, p, sysr, procs)
        else:
            res = fns[scenario](ad, w, p, sysr)
        for plabel, rc, path in ad.fleet.died():
            issues.append(f"{label}: {plabel} exited early with status {rc}: {tail(path, 4)}")
        if (
            isinstance(ad, DuetimeAdapter)
            and scenario == "recurring"
            and res.get(f"rec{procs}_missed")
        ):
            issues.append(f"{label}: missed ticks; {ad.diagnose()}")
        if isinstance(ad, DuetimeAdapter) and procs:
            st = ad.store_stats()
            res["duetime_stats"] = st
            # the live count's fields are no events (protocol/keys.py LIVE_FIELDS)
            usual = ("scheduled", "claimed", "succeeded", "live", "live_since")
            odd = {k: v for k, v in st.items() if k not in usual}
            if odd:
                issues.append(
                    f"{label}: duetime store events besides scheduled/claimed/succeeded: {odd}"
                )
    except Exception as e:
        issues.append(f"{label}: {type(e).__name__}: {str(e)[:300]}")
        res["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        if not started:
            extra["start_failed"].setdefault(A.name, res["error"])
    problems = ad.stop() if started else ad.fleet.stop(timeout=5)
    issues += [f"{label}: {x}" for x in problems]
    n, samples = scan_logs(ad.logs())
    if n:
        issues.append(f"{label}: {n} suspicious log line(s), e.g. " + " || ".join(samples))
    sysr.close()
    server.stop()
    _LIVE_SERVERS.discard(server)
    wd.disarm()
    res.update(
        system=A.name, scenario=scenario, procs=procs, run=run, seconds=round(perf() - t0, 1)
    )
    raw.append(res)
    return res


def run_all(args, avail):
    p = params(args.quick)
    w = Witness()
    logdir = tempfile.mkdtemp(prefix="bench-shared-logs-")
    raw, issues, extra = [], [], {"start_failed": {}, "logdir": logdir}
    systems = [A for A in ADAPTERS if A.key() in args.systems and avail[A.name] is None]
    try:
        for run in range(1, args.runs + 1):
            for sc in SCENARIOS:
                if sc not in args.only:
                    continue
                for A in systems:
                    for procs in plan(A, sc):
                        one(A, sc, procs, run, p, w, logdir, issues, raw, extra)
                        time.sleep(0.3)
    finally:
        w.close()
    return p, raw, issues, extra


def medians(raw):
    by = collections.defaultdict(list)
    for r in raw:
        by[r["system"]].append(r)
    out = {}
    for name, runs in by.items():
        keys = {
            k
            for r in runs
            for k, v in r.items()
            if isinstance(v, (int, float))
            and not isinstance(v, bool)
            and k not in ("run", "procs", "seconds")
        }
        out[name] = {
            k: statistics.median([r[k] for r in runs if isinstance(r.get(k), (int, float))])
            for k in keys
        }
        for flag in ("lag_enq_late", "burst_enq_late", "burst_partial"):
            out[name][flag] = any(r.get(flag) for r in runs)
    return out


def ratio_cell(better, dt, best):
    if better is None or dt is None or best is None or min(abs(dt), abs(best)) < 1e-9:
        return ""
    r = best / dt if better == "low" else dt / best
    return f"x{r:.2f}"


def cell(name, key, fmt, med, A, p):
    m = med.get(name, {})
    if key.startswith("rec"):
        procs = int(key[3])
        if not A.every:
            return "n/a"
        if procs not in plan(A, "recurring"):
            if issubclass(A, DuetimeAdapter):
                return ""
            return "n/a (1 proc)" if procs > 1 else "n/a"
        if key.endswith("_lag"):
            a, b = m.get(f"{key[:4]}_lag_p50"), m.get(f"{key[:4]}_lag_max")
            return "-" if a is None else f"{a:.0f}/{b:.0f}"
        a, b = m.get(f"{key}_dup"), m.get(f"{key}_missed")
        return "-" if a is None else f"{a:.0f}/{b:.0f}"
    if key == "mem_bytes_job" and A is Duetime3:
        return "(as d(1))"
    v = m.get(key)
    if v is None:
        return "-"
    s = fmt.format(v)
    if key == "burst_jobs_s" and m.get("burst_partial"):
        s = "~" + s
    if key in ("enq_us",) and m.get("lag_enq_late"):
        s += " *"
    if key == "burst_enqueue_s" and m.get("burst_enq_late"):
        s += " *"
    return s


def machine_info():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    vers = {}
    for dist in ("redis", "hiredis", "click", "APScheduler", "rq", "arq", "huey", "saq", "psutil"):
        try:
            vers[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            vers[dist] = "not installed"
    import scheduler

    vers["duetime"] = getattr(scheduler, "__version__", "?")
    if not scheduler.__file__.startswith(ROOT):
        raise SystemExit(f"duetime was imported from {scheduler.__file__}, not from {ROOT}")
    server = EmbeddedRedis(appendonly=False)
    try:
        rs = subprocess.run(
            [server.binary, "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except Exception as e:
        rs = f"? ({e})"
    head = SNAPSHOT["head"] + ("+local changes" if SNAPSHOT["dirty"] else "")
    if SNAPSHOT["dir"]:
        head += f" (snapshot {SNAPSHOT['dir']})"
    env = (
        f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if "PYTHONPATH" in os.environ else ""
    )
    return {
        "command": env + shlex.join([sys.executable] + sys.argv),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": f"{cpu} x {os.cpu_count()} logical",
        "redis_server": rs,
        "versions": vers,
        "git_head": head,
        "date": datetime.now(_UTC).isoformat(timespec="seconds"),
    }


def redis_settings():
    with EmbeddedRedis(appendonly=False) as s:
        r = redis.Redis.from_url(s.url, decode_responses=True)
        cfg = {}
        for pat in (
            "hash-max-listpack-*",
            "zset-max-listpack-*",
            "list-max-listpack-size",
            "appendonly",
            "maxmemory-policy",
            "save",
        ):
            cfg.update(r.config_get(pat))
        r.close()
    return cfg


def render(info, p, med, avail, issues, extra, args, cfg):
    names = [A.name for A in ADAPTERS if A.key() in args.systems]
    adapters = {A.name: A for A in ADAPTERS}
    peers = [n for n in names if not issubclass(adapters[n], DuetimeAdapter)]
    v = info["versions"]
    out = [
        "duetime shared-mode (Redis) benchmark",
        f"command : {info['command']}",
        f"python  : {info['python']}   platform: {info['platform']}   duetime {v['duetime']} @ {info['git_head']}",
        f"cpu     : {info['cpu']}   {info['date']}",
        f"redis   : {info['redis_server']}",
        "peers   : "
        + ", ".join(
            f"{k} {v[k]}" for k in ("APScheduler", "rq", "arq", "huey", "saq", "redis", "hiredis")
        ),
        "settings: " + " ".join(f"{k}={v!r}" for k, v in sorted(cfg.items())),
        f"params  : runs={args.runs} (median shown) " + " ".join(f"{k}={x}" for k, x in p.items()),
        "",
    ]
    header = ["figure"] + names + ["best peer", "d(1) vs best", "d(3) vs best"]
    rows = [header]
    for key, label, better, fmt in ROWS:
        if not any(key.startswith(x) for x in _scenario_keys(args.only)):
            continue
        row = [label]
        for n in names:
            c = "n/a" if avail[n] else cell(n, key, fmt, med, adapters[n], p)
            if c == "-" and extra["start_failed"].get(n):
                c = "n/a (start)"
            row.append(c)
        best_name, best = None, None
        if better:
            vals = [(med.get(n, {}).get(key), n) for n in peers if not avail[n]]
            vals = [(x, n) for x, n in vals if x is not None]
            if vals:
                best, best_name = (min if better == "low" else max)(vals)
        d1 = med.get("duetime(1)", {}).get(key)
        d3 = med.get("duetime(3)", {}).get(key) if key != "mem_bytes_job" else None
        row += [best_name or "", ratio_cell(better, d1, best), ratio_cell(better, d3, best)]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        out.append(
            "  ".join(
                c.ljust(wd_) if j == 0 else c.rjust(wd_)
                for j, (c, wd_) in enumerate(zip(r, widths))
            )
        )
        if i == 0:
            out.append("  ".join("-" * x for x in widths))
    out += [
        "",
        "'vs best' = how many times better duetime is than the best peer on that row (>1: duetime better):",
        "  best/duetime for lower-is-better rows, duetime/best for throughput. Peers run 1 scheduler process.",
        "recurring rows: dup/missed ticks out of the window, lag p50/max in ms; the 2- and 3-proc duetime figures",
        "  are in the duetime(3) column. 'n/a (1 proc)': the peer has no multi-process dedup for recurring jobs.",
        "~ = not every burst job ran within the timeout (rate over those that did); * = enqueueing all took",
        "  longer than the lead, so jobs were due while still being enqueued.",
        "",
    ]
    for n in names:
        A = adapters[n]
        why = avail[n] or extra["start_failed"].get(n)
        out.append(f"{n:12s}: {A.note}" + (f"  [n/a: {why}]" if why else ""))
    last = {}
    for r in extra.get("raw", []):
        for k in ("idle_breakdown", "mem_detail", "burst_breakdown"):
            if r.get(k):
                last[(r["system"], k)] = r[k]
    for (n, k), d in sorted(last.items()):
        what = {
            "idle_breakdown": "idle cmds/s by command",
            "mem_detail": "memory per pending job",
            "burst_breakdown": "burst: Redis time per job by command",
        }[k]
        out.append(
            f"{n} {what} (last run): " + ", ".join(f"{a} {b}" for a, b in list(d.items())[:8])
        )
    out.append(f"process logs: {extra['logdir']}")
    if issues:
        out += ["", "ISSUES:"] + [f"  - {i}" for i in issues]
    return "\n".join(out)


def _scenario_keys(only):
    keys = {
        "lag": ["lag", "enq"],
        "burst": ["burst"],
        "idle": ["idle"],
        "recurring": ["rec"],
        "mem": ["mem"],
    }
    return [k for sc in only for k in keys[sc]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller N / shorter windows (smoke run)")
    ap.add_argument(
        "--runs", type=int, default=3, help="repeat each scenario K times, report the median"
    )
    ap.add_argument("--json", metavar="PATH", help="dump raw and median results as JSON")
    ap.add_argument(
        "--only",
        nargs="+",
        choices=SCENARIOS,
        default=SCENARIOS,
        metavar="SCENARIO",
        help=f"run only these scenarios: {' '.join(SCENARIOS)}",
    )
    keys = [A.key() for A in ADAPTERS]
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import duetime from the live checkout instead of a copy taken at start",
    )
    ap.add_argument(
        "--systems",
        nargs="+",
        metavar="NAME",
        default=keys,
        help=f"run only these systems: {' '.join(keys)} (or duetime = both duetime columns)",
    )
    args = ap.parse_args()
    chosen = []
    for s in args.systems:
        s = re.sub(r"\W", "", s.lower())
        for k in ALIASES.get(s, [s]):
            if k not in keys:
                ap.error(f"unknown system {s!r}; pick from {' '.join(keys)}")
            chosen.append(k)
    args.systems = chosen
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(130))  # atexit then kills the children
    info, cfg = machine_info(), redis_settings()
    avail = {A.name: A.unavailable() for A in ADAPTERS}
    p, raw, issues, extra = run_all(args, avail)
    extra["raw"] = raw
    med = medians(raw)
    text = render(info, p, med, avail, issues, extra, args, cfg)
    print(text, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "info": info,
                    "params": p,
                    "redis_settings": cfg,
                    "availability": avail,
                    "raw": raw,
                    "median": med,
                    "issues": issues,
                    "extra": {k: v for k, v in extra.items() if k != "raw"},
                },
                f,
                indent=2,
                default=str,
            )


wd = Watchdog()

if __name__ == "__main__":
    main()
