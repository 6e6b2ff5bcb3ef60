"""Task bodies and worker entry points for ``bench_shared.py`` (not a test module).

Every system's task does the same thing: note its start time and append one record
``tag|due_ms|start_ms|pid|sched_ms`` to the list ``bench:hits`` of the *witness* Redis
(``$BENCH_WITNESS_URL``, a server separate from the one the scheduler under test uses,
so the witness traffic is not counted). ``sched_ms`` is the occurrence the system says
it is running (duetime: ``current_invocation().scheduled_ms``; arq: the job score; saq:
the job's ``scheduled``), or -1 where the system does not tell.

duetime replicas import this module with ``--import shared_tasks``. The peers' worker
processes are started by the benchmark as
``python -c "import shared_tasks; shared_tasks.main()" SYSTEM [cron]`` with
``$BENCH_REDIS_URL`` set; their libraries are imported only there.
"""

from __future__ import annotations

import os
import sys
import time

import redis

import scheduler

HITS, READY = "bench:hits", "bench:ready"
_conn: dict[int, redis.Redis] = {}  # per pid: a forked work horse must not share a socket


def _witness() -> redis.Redis:
    pid = os.getpid()
    if pid not in _conn:
        _conn[pid] = redis.Redis.from_url(os.environ["BENCH_WITNESS_URL"])
    return _conn[pid]


def _line(tag: str, due_ms: float, start_ms: float, sched_ms: float) -> str:
    return f"{tag}|{due_ms:.0f}|{start_ms:.3f}|{os.getpid()}|{sched_ms:.0f}"


def record(tag: str, due_ms: float, start_ms: float, sched_ms: float = -1) -> None:
    _witness().rpush(HITS, _line(tag, due_ms, start_ms, sched_ms))


def ready(system: str) -> None:
    """A worker process announces it is up (peers only; duetime replicas are seen by
    their ``replica:*`` keys)."""
    _witness().rpush(READY, f"{system}:{os.getpid()}")


# ------------------------------------------------------------------------ duetime
@scheduler.task("bench.hit")
def hit(due_ms: int, tag: str = "") -> None:
    start = time.time() * 1000
    try:
        sched = scheduler.current_invocation().scheduled_ms
    except RuntimeError:
        sched = -1
    record(tag, due_ms, start, sched)


@scheduler.task("bench.hold")
def hold(due_ms: int, tag: str = "", hold_s: float = 0.2) -> None:
    """A start noted as ``bench.hit``'s, ``hold_s`` seconds of work, then its end: a line
    ``<tag>-end|due|start|pid|end`` (bench_flow.py: what ran at once)."""
    start = time.time() * 1000
    record(tag, due_ms, start)
    time.sleep(hold_s)
    end = time.time() * 1000
    _witness().rpush(HITS, f"{tag}-end|{due_ms:.0f}|{start:.3f}|{os.getpid()}|{end:.3f}")


@scheduler.task("bench.ahit")
async def ahit(due_ms: int, tag: str = "") -> None:
    """``bench.hit`` as an ``async def`` (bench_async.py): the record goes through an
    asyncio witness client of this worker thread's own loop, as arq's and saq's do."""
    start = time.time() * 1000
    sched = scheduler.current_invocation().scheduled_ms
    await _thread_awitness().rpush(HITS, _line(tag, due_ms, start, sched))


def _thread_awitness():  # type: ignore[no-untyped-def]
    """An asyncio witness client per (process, worker thread): each duetime worker thread
    runs its async jobs on a loop of its own, and a redis.asyncio pool belongs to one."""
    import threading

    import redis.asyncio as aredis

    key = (os.getpid(), threading.get_ident())
    if key not in _aconn:
        _aconn[key] = aredis.Redis.from_url(os.environ["BENCH_WITNESS_URL"])
    return _aconn[key]


@scheduler.task("bench.noop")
def noop(**_: object) -> None:
    """Does nothing and records nothing: duetime's own cost per job
    (probe_shared_burst.py --task noop), or jobs a replica runs only so that its local
    state is exercised (bench_scale.py)."""


# The no-op pair (bench_async.py): duetime's sync and async paths compared without a
# witness client's cost. Each notes its start in this process's memory (a list append:
# no I/O, nothing awaited); completion is seen from duetime's own ``stats`` counter and
# the notes reach the witness in bulk on SIGUSR1 (installed when $BENCH_STAMPS=1).
_stamps: list[str] = []


@scheduler.task("bench.stamp")
def stamp(due_ms: int, tag: str = "") -> None:
    _stamps.append(_line(tag, due_ms, time.time() * 1000, -1))


@scheduler.task("bench.astamp")
async def astamp(due_ms: int, tag: str = "") -> None:
    """``bench.stamp`` as an ``async def`` that awaits nothing."""
    _stamps.append(_line(tag, due_ms, time.time() * 1000, -1))


def _dump_stamps() -> None:
    """Push this process's notes to the witness, then ``READY`` ``dump:<pid>``."""
    lines = list(_stamps)
    w = redis.Redis.from_url(os.environ["BENCH_WITNESS_URL"])
    for i in range(0, len(lines), 5000):
        w.rpush(HITS, *lines[i : i + 5000])
    w.rpush(READY, f"dump:{os.getpid()}")
    w.close()


def _on_usr1(*_: object) -> None:
    import threading

    threading.Thread(target=_dump_stamps, name="bench-dump", daemon=True).start()


if os.environ.get("BENCH_STAMPS") == "1":
    import signal

    signal.signal(signal.SIGUSR1, _on_usr1)


_lags: list[float] = []  # bench.note: start - scheduled (ms) of each run in this process


def _dump_lags() -> None:
    with open(os.path.join(os.environ["BENCH_LAG_DIR"], f"lag-{os.getpid()}.txt"), "w") as f:
        f.write("\n".join(f"{x:.3f}" for x in _lags))


if os.environ.get("BENCH_LAG_DIR"):
    import atexit

    atexit.register(_dump_lags)  # `duetime run` exits normally on SIGTERM


@scheduler.task("bench.note")
def note(**_: object) -> None:
    """Does nothing but note its lag (start - scheduled occurrence) in this process; the
    list is written to $BENCH_LAG_DIR/lag-<pid>.txt at exit (probe_cpu.py --kind
    recurring/cron)."""
    _lags.append(time.time() * 1000 - scheduler.current_invocation().scheduled_ms)


@scheduler.task("bench.flaky")
def flaky(**_: object) -> None:
    """Fails on its first attempt, succeeds on the next (probe_cpu.py --kind retry)."""
    if scheduler.current_invocation().attempt == 1:
        raise RuntimeError("first attempt fails (bench)")


# ------------------------------------------------------------------ APScheduler 3
def aps_hit(due_ms: int, tag: str = "") -> None:  # runs in the benchmark process
    record(tag, due_ms, time.time() * 1000)


# ------------------------------------------------------------------------------ RQ
def rq_hit(due_ms: int, tag: str = "") -> None:
    record(tag, due_ms, time.time() * 1000)


def rq_tick() -> None:
    record("tick", 0, time.time() * 1000)


def _rq_cron(url: str) -> None:
    from rq.cron import CronScheduler

    cron = CronScheduler(connection=redis.Redis.from_url(url), logging_level="WARNING")
    cron.register(rq_tick, "default", cron="* * * * * *")  # 6 fields: every second
    ready("rq-cron")
    cron.start()


# ----------------------------------------------------------------------------- arq
_aconn: dict[int, object] = {}


def _awitness():  # type: ignore[no-untyped-def]
    import redis.asyncio as aredis

    if os.getpid() not in _aconn:
        _aconn[os.getpid()] = aredis.Redis.from_url(os.environ["BENCH_WITNESS_URL"])
    return _aconn[os.getpid()]


async def _arecord(line: str) -> None:  # for the asyncio peers (arq, saq)
    await _awitness().rpush(HITS, line)


async def arq_hit(ctx: dict, due_ms: int, tag: str = "") -> None:
    await _arecord(_line(tag, due_ms, time.time() * 1000, -1))


async def arq_tick(ctx: dict) -> None:
    start = time.time() * 1000
    await _arecord(_line("tick", 0, start, ctx.get("score") or -1))


async def _arq_startup(ctx: dict) -> None:
    await _awitness().rpush(READY, f"arq:{os.getpid()}")


def _arq(url: str, cron_on: bool, workers: int) -> None:
    from arq import cron
    from arq.connections import RedisSettings
    from arq.worker import run_worker

    class Settings:
        functions = [arq_hit]
        redis_settings = RedisSettings.from_dsn(url)
        max_jobs = workers
        on_startup = _arq_startup
        cron_jobs = (
            [cron(arq_tick, second=set(range(60)), microsecond=0, unique=True)] if cron_on else []
        )

    run_worker(Settings)


# ---------------------------------------------------------------------------- huey
_hueys: dict[str, tuple] = {}


def make_huey(url: str) -> tuple:
    """(huey, hit task) for ``url``; the producer and the consumer build the same."""
    if url not in _hueys:
        from huey import RedisHuey

        h = RedisHuey("bench", url=url)

        @h.task(name="huey_hit")
        def huey_hit(due_ms: int, tag: str = "") -> None:
            record(tag, due_ms, time.time() * 1000)

        _hueys[url] = (h, huey_hit)
    return _hueys[url]


def _huey(url: str, workers: int) -> None:
    h, _ = make_huey(url)
    consumer = h.create_consumer(workers=workers, worker_type="thread", periodic=False)
    ready("huey")
    consumer.run()


# ----------------------------------------------------------------------------- saq
async def saq_hit(ctx: dict, *, due_ms: int, tag: str = "") -> None:
    await _arecord(_line(tag, due_ms, time.time() * 1000, -1))


async def saq_tick(ctx: dict) -> None:
    start = time.time() * 1000
    job = ctx.get("job")
    sched = float(job.scheduled) * 1000 if job is not None and job.scheduled else -1
    await _arecord(_line("tick", 0, start, sched))


async def _saq_startup(ctx: dict) -> None:
    await _awitness().rpush(READY, f"saq:{os.getpid()}")


def saq_settings() -> dict:
    from saq import CronJob, Queue

    cron_on = os.environ.get("BENCH_CRON") == "1"
    return {
        "queue": Queue.from_url(os.environ["BENCH_REDIS_URL"]),
        "functions": [saq_hit, saq_tick],
        "concurrency": int(os.environ.get("BENCH_WORKERS", "4")),
        "startup": _saq_startup,
        "cron_jobs": [CronJob(saq_tick, cron="* * * * * *")] if cron_on else [],
    }


# ---------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> None:
    """``SYSTEM``: rq-cron | arq | huey | saq; the Redis URL is $BENCH_REDIS_URL,
    cron on if $BENCH_CRON=1, worker count $BENCH_WORKERS (default 4)."""
    argv = sys.argv[1:] if argv is None else argv
    system, url = argv[0], os.environ["BENCH_REDIS_URL"]
    cron_on = os.environ.get("BENCH_CRON") == "1"
    workers = int(os.environ.get("BENCH_WORKERS", "4"))
    if system == "rq-cron":
        _rq_cron(url)
    elif system == "arq":
        _arq(url, cron_on, workers)
    elif system == "huey":
        _huey(url, workers)
    elif system == "saq":
        from saq.worker import start

        start("shared_tasks.saq_settings")
    else:
        raise SystemExit(f"unknown system {system!r}")


# Instrumentation for probe_async_calls.py ($BENCH_CALLS=1): thread CPU spent in each job's
# call (workers.coroutines.call, or an async job's _Loop.run_job) and in the whole
# Runner.run, and each thread group's CPU, written to $BENCH_CALLS_DIR/calls-<pid>.json on
# SIGUSR2 (trees before run_job: coroutines.call(fn, is_coroutine, token) served both).
if os.environ.get("BENCH_CALLS") == "1":
    import json
    import signal
    import threading

    from workers import coroutines, runner

    _acc = {"call": [0, 0], "run": [0, 0]}
    _call, _run, _tt = coroutines.call, runner.Runner.run, time.thread_time_ns

    def _timed(call):  # type: ignore[no-untyped-def]
        def timed(*args):  # type: ignore[no-untyped-def]
            t = _tt()
            try:
                return call(*args)
            finally:
                _acc["call"][0] += _tt() - t
                _acc["call"][1] += 1

        return timed

    def _timed_run(self, work):  # type: ignore[no-untyped-def]
        t = _tt()
        try:
            return _run(self, work)
        finally:
            _acc["run"][0] += _tt() - t
            _acc["run"][1] += 1

    coroutines.call = _timed(_call)  # type: ignore[assignment]
    if hasattr(coroutines, "_Loop") and hasattr(coroutines._Loop, "run_job"):
        coroutines._Loop.run_job = _timed(coroutines._Loop.run_job)  # type: ignore[method-assign]
    runner.Runner.run = _timed_run  # type: ignore[method-assign]

    def _calls_dump(*_: object) -> None:
        threads: dict[str, float] = {}
        for t in threading.enumerate():
            try:
                with open(f"/proc/self/task/{t.native_id}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            group = "".join(c for c in t.name if not c.isdigit()).rstrip("-")
            group = "duetime-dispatch" if group.startswith("duetime-dispatch") else group
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            threads[group] = threads.get(group, 0.0) + cpu
        out = {"ns": dict(_acc), "threads": threads}
        path = os.path.join(os.environ.get("BENCH_CALLS_DIR", "/tmp"), f"calls-{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR2, _calls_dump)
