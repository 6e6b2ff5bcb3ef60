"""Process lanes (issue 34 items 1-3, 5): jobs run in worker processes that a timeout or an
interrupt stops (SIGTERM, SIGKILL after the grace), whose death fails only that invocation,
and which are recycled after N jobs or past a memory ceiling. Real child processes, on the
fake clock (a timeout fires when the test advances it); a job's start is signalled by its
own forwarded log line ("started"), never by a sleep. Jobs are added by the engine itself
(``after``: its dispatcher learns at once; a Redis wake-up is asynchronous)."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from scheduler import Lane, RetryPolicy
from scheduler.engine import Scheduler
from scheduler.stores.memory import MemoryStore
from tests.helpers import WAIT
from tests.unit import process_jobs  # registers the proc.* tasks
from workers import processes

RETRY = RetryPolicy(max_attempts=2, backoff=1.0, jitter=0.0)


class Started(logging.Handler):
    """The "started" lines the jobs log in their worker processes, as the replica logs
    them (with the job's fields): one event per job id."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.guard = threading.Lock()
        self.events: dict[str, threading.Event] = {}
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if record.getMessage().startswith("started"):
            self.event(record.job_id).set()  # type: ignore[attr-defined]

    def event(self, job_id: str) -> threading.Event:
        with self.guard:
            return self.events.setdefault(job_id, threading.Event())

    def wait(self, job_id: str) -> None:
        assert self.event(job_id).wait(WAIT * 4), f"job {job_id} did not start"
        self.event(job_id).clear()


@pytest.fixture
def started():
    handler = Started()
    logger = logging.getLogger("tests.process_jobs")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture
def engine_store(request, clock):
    """The in-process store, and a RedisStore on a real server (``-m redis`` tier)."""
    if request.param == "memory":
        return MemoryStore(clock)
    from scheduler.stores.redis import RedisStore

    s = RedisStore(request.getfixturevalue("redis_url"), request.getfixturevalue("redis_ns"))
    s = RedisStore(s.url, request.getfixturevalue("redis_ns"), clock=clock)
    request.addfinalizer(s.close)
    return s


BOTH = pytest.mark.parametrize(
    "engine_store", ["memory", pytest.param("redis", marks=pytest.mark.redis)], indirect=True
)


def _lane(make_engine, store=None, **lane):
    lane.setdefault("isolation", "process")
    workers = lane.pop("workers", 2)
    kw = {} if store is None else {"store": store}
    return make_engine(1, lanes={"p": Lane(workers, **lane)}, **kw)


def _live(engine: Scheduler) -> list[int]:
    return engine._processes.pids()["p"]  # type: ignore[union-attr]


@BOTH
def test_sync_and_async_tasks_run_in_a_worker_process_with_their_context(
    make_engine, engine_store, started
):
    engine = _lane(make_engine, engine_store)
    sync = engine.after("proc.whoami", 0, kwargs={"tag": "s"}, lane="p")
    coro = engine.after("proc.awhoami", 0, kwargs={"tag": "a"}, lane="p")
    assert engine.wait_idle(WAIT * 4)
    got = engine.get(sync).last_result
    assert got["pid"] != os.getpid() and got["pid"] in _live(engine)
    assert (got["job_id"], got["attempt"], got["lane"], got["cancelled"]) == (sync, 1, "p", False)
    assert got["fence"] >= 1 and got["scheduled_ms"] > 0
    assert engine.get(coro).last_result["job_id"] == coro
    # the child's log line reached the replica's log, with the job's fields
    line = next(r for r in started.records if getattr(r, "job_id", None) == sync)
    assert (line.levelno, line.lane, line.attempt) == (logging.WARNING, "p", 1)  # type: ignore[attr-defined]
    assert line.process == got["pid"]


@BOTH
def test_a_hung_job_is_stopped_at_its_timeout_recorded_timed_out_and_retried(
    make_engine, engine_store, started, clock, tmp_path
):
    engine = _lane(make_engine, engine_store)
    marker = tmp_path / "seen"
    job = engine.after(
        "proc.hang", 0, kwargs={"marker": str(marker)}, lane="p", timeout=2, retry=RETRY
    )
    started.wait(job)
    before = _live(engine)
    began = time.monotonic()
    clock.advance(2.01)  # its timeout fires
    assert engine.wait_idle(WAIT * 4)
    took = time.monotonic() - began
    assert took < 5.0 + 1.0  # within the grace (default 5 s) + 1 s; SIGTERM ends it at once
    info = engine.get(job)
    assert info.last_error == "InvocationTimeout: job ran past its timeout of 2s"
    assert info.state == "scheduled" and info.attempts == 1  # retried per its policy
    assert marker.read_text() == f"True timeout {job} 1\n"  # cancelled(), its reason, in the child
    assert len(_live(engine)) == 2 and set(_live(engine)) != set(before)  # replaced
    clock.advance(1.0)  # the retry is due
    started.wait(job)
    clock.advance(2.01)
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(job)
    assert info.state == "failed" and len(info.dead_letters) == 1


def test_an_async_job_is_stopped_too(make_engine, started, clock):
    engine = _lane(make_engine, workers=1)
    job = engine.after("proc.ahang", 0, lane="p", timeout=1)
    started.wait(job)
    clock.advance(1.01)
    assert engine.wait_idle(WAIT * 4)
    assert engine.get(job).last_error == "InvocationTimeout: job ran past its timeout of 1s"


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(make_engine, started, clock, caplog):
    engine = _lane(make_engine, workers=1, kill_grace=0.5)
    job = engine.after("proc.stubborn", 0, lane="p", timeout=1)
    started.wait(job)
    began = time.monotonic()
    clock.advance(1.01)
    assert engine.wait_idle(WAIT * 4)
    assert 0.5 <= time.monotonic() - began < 0.5 + 1.0
    assert engine.get(job).last_error == "InvocationTimeout: job ran past its timeout of 1s"
    assert "SIGKILLed" in caplog.text and "past kill_grace=0.5s" in caplog.text
    assert len(_live(engine)) == 1


def test_an_interrupt_stops_the_worker_process(make_engine, started, tmp_path):
    engine = _lane(make_engine, workers=1)
    marker = tmp_path / "seen"
    job = engine.after("proc.hang", 0, kwargs={"marker": str(marker)}, lane="p")
    started.wait(job)
    engine.cancel(job, interrupt=True, wait=True, timeout=WAIT * 2)
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(job)
    assert info.state == "cancelled"
    assert marker.read_text() == f"True cancelled {job} 1\n"
    events = [e for e in engine.events() if e.job_id == job and e.kind == "interrupted"]
    assert events and "its worker process was stopped" in events[0].detail


@BOTH
@pytest.mark.parametrize(
    ("task", "reason"),
    [
        ("proc.sigkill", "SIGKILL (signal 9)"),
        ("proc.exit", "exit code 1"),
        ("proc.segfault", "SIGSEGV (signal 11)"),
    ],
)
def test_a_child_that_dies_fails_its_invocation_and_the_lane_goes_on(
    make_engine, engine_store, clock, task, reason
):
    engine = _lane(make_engine, engine_store)
    job = engine.after(task, 0, lane="p", retry=RETRY)
    other = engine.after("proc.whoami", 0, lane="p")
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(job)
    assert info.last_error.startswith("WorkerProcessError: worker process ")
    assert info.last_error.endswith(f"of lane 'p' died while it ran the job: {reason}")
    assert info.state == "scheduled" and info.attempts == 1  # retried per its policy
    assert engine.get(other).state == "succeeded"
    assert len(_live(engine)) == 2


def test_a_poison_job_ends_dead_lettered_and_the_lane_keeps_serving(make_engine, clock):
    engine = _lane(make_engine)
    poison = engine.after(
        "proc.exit", 0, kwargs={"code": 3}, lane="p", retry=RetryPolicy(3, backoff=0.5, jitter=0)
    )
    served = []
    for _ in range(3):
        served.append(engine.after("proc.whoami", 0, lane="p"))
        assert engine.wait_idle(WAIT * 4)
        clock.advance(1.0)
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(poison)
    assert info.state == "failed" and [d.attempt for d in info.dead_letters] == [3]
    assert all(engine.get(j).state == "succeeded" for j in served)
    assert len(_live(engine)) == 2


def test_a_job_error_keeps_its_type_message_and_traceback(make_engine):
    engine = _lane(make_engine, workers=1)
    job = engine.after("proc.boom", 0, kwargs={"message": "no"}, lane="p")
    bad = engine.after("proc.notjson", 0, lane="p")
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(job)
    assert info.last_error == "ValueError: no"
    assert "process_jobs.py" in info.last_traceback and "raise ValueError" in info.last_traceback
    assert engine.get(bad).last_error.startswith("ResultNotJSONError: the job returned a set")
    assert len(_live(engine)) == 1  # an error is no crash: the same child goes on


def test_a_worker_process_is_recycled_after_max_jobs(make_engine):
    engine = _lane(make_engine, workers=1, max_jobs=2)
    pids = []
    for _ in range(3):
        job = engine.after("proc.whoami", 0, lane="p")
        assert engine.wait_idle(WAIT * 4)
        pids.append(engine.get(job).last_result["pid"])
    assert pids[0] == pids[1] != pids[2]


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc (Linux)")
def test_a_worker_process_is_recycled_past_its_memory_ceiling(make_engine):
    engine = _lane(make_engine, workers=1, max_memory_mb=40)
    grew = engine.after("proc.grow", 0, kwargs={"mb": 64}, lane="p")
    assert engine.wait_idle(WAIT * 4)
    after = engine.after("proc.whoami", 0, lane="p")
    assert engine.wait_idle(WAIT * 4)
    assert engine.get(after).last_result["pid"] != engine.get(grew).last_result


def test_a_registered_task_given_as_its_function_runs_in_the_process_lane(make_engine):
    """The facades take functions: a registered one crosses by its name."""
    from scheduler import JobScheduler

    with JobScheduler(1, lanes={"p": Lane(1, "process")}) as s:
        job = s.schedule(process_jobs.whoami, 0, lane="p")
        assert s.engine.wait_idle(WAIT * 4)
        info = s.engine.get(str(job))
        assert info.state == "succeeded" and info.last_result["pid"] != os.getpid()


def test_a_callable_cannot_go_to_a_process_lane(make_engine):
    engine = _lane(make_engine, workers=1)
    with pytest.raises(TypeError, match="only a registered task .* can cross"):
        engine.after(lambda: None, 0, lane="p")


@pytest.mark.parametrize(
    ("lanes", "error", "match"),
    [
        ({"p": 0}, ValueError, r"a pool needs at least 1 worker"),
        ({"p": "2"}, TypeError, r"lane 'p': give a worker count .* got str"),
        ({"p": 2.5}, TypeError, r"got float"),
    ],
)
def test_bad_lane_config_is_one_clear_error(lanes, error, match):
    with pytest.raises(error, match=match):
        Scheduler(1, lanes=lanes)


def test_lane_checks_its_fields():
    with pytest.raises(ValueError, match=r"Lane.workers must be an int >= 1, got 0"):
        Lane(0, "process")
    with pytest.raises(ValueError, match="isolation is 'thread' or 'process'"):
        Lane(2, "processes")
    with pytest.raises(ValueError, match="need isolation='process'"):
        Lane(2, max_jobs=10)
    with pytest.raises(ValueError, match="kill_grace must be"):
        Lane(2, "process", kill_grace=-1)
    with pytest.raises(ValueError, match="max_memory_mb must be"):
        Lane(2, "process", max_memory_mb=0)
    with pytest.raises(ValueError, match="257 is more than the 256 worker processes one lane"):
        Lane(257, "process")  # refused before any starts (each is a Python process)
    with pytest.raises(ValueError, match="4097 is more than the 4096 worker threads"):
        Lane(4097)
    assert Lane(256, "process").workers == 256


def test_an_engine_that_fails_to_start_leaves_no_worker_process(monkeypatch):
    """Bad input checked after the lanes started (``lookahead``), or any failure of the
    rest of the start: the worker processes are stopped before the error leaves."""
    started: list = []
    real = processes.ProcessLanes.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(processes.ProcessLanes, "__init__", spy)
    with pytest.raises(ValueError, match="lookahead"):
        Scheduler(1, lanes={"p": Lane(1, "process")}, lookahead=-1)
    assert len(started) == 1
    assert started[0].pids() == {"p": []}  # its one child stopped


def test_a_platform_without_spawn_says_so_at_start(monkeypatch):
    import multiprocessing

    def no_spawn(method=None):
        raise ValueError(f"cannot find context for {method!r}")

    monkeypatch.setattr(multiprocessing, "get_context", no_spawn)
    with pytest.raises(RuntimeError, match=r"process lanes need multiprocessing's 'spawn'"):
        Scheduler(1, lanes={"p": Lane(1, "process")})


def test_thread_lanes_are_wired_as_before_without_a_process_lane(make_engine):
    """No process lane: the runner calls the registry's resolver itself and each pool
    runs ``Runner.run``: a thread lane's per-job path gains nothing."""
    from scheduler import tasks
    from workers.coroutines import close_loop

    engine = make_engine(2, lanes={"slow": 2, "t": Lane(1)})
    assert engine._processes is None
    assert engine._runner._resolve is tasks.resolve
    pools = engine._lanes._pools
    assert all(p._run == engine._runner.run for p in pools.values())
    assert all(p._on_exit is close_loop for p in pools.values())


@BOTH
def test_progress_reported_in_a_worker_process_reaches_the_job(make_engine, engine_store):
    """``current_invocation().progress`` in a process lane: checked in the child (a value
    that is not JSON fails the job there, as in a thread lane), written by the replica."""
    engine = _lane(make_engine, engine_store)
    good = engine.after("proc.progress", 0, kwargs={"value": {"done": 3}}, lane="p")
    bad = engine.after("proc.progress", 0, kwargs={"value": "not json"}, lane="p")
    assert engine.wait_idle(WAIT * 4)
    got = engine.get(good)
    assert got.last_result == "reported" and got.progress is not None
    assert got.progress.value == {"done": 3}
    failed = engine.get(bad)
    assert failed.last_result is None and "ProgressError" in (failed.last_error or "")
