"""Issue 14: what the first step left unpinned for ``async def`` jobs. SystemExit is
isolated; misfire policies apply as for sync jobs; shutdown waits for running coroutines
up to its timeout; the eager start keeps asyncio's own rules (current task, timeouts,
task groups, context variables); the loop-lag read-out shows blocking code; scheduling
from inside a coroutine job need not block its loop."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time

import pytest

from scheduler import JobScheduler, current_invocation
from scheduler.metrics import Metrics
from scheduler.model import Misfire
from tests.helpers import WAIT


def test_system_exit_raised_by_an_async_job_is_isolated_and_recorded(make_engine):
    eng = make_engine(1)

    async def exits_at_once() -> None:
        raise SystemExit(3)

    async def exits_later() -> None:
        await asyncio.sleep(0)
        raise SystemExit(4)

    eng.after(exits_at_once, 0, job_id="now")
    eng.after(exits_later, 0, job_id="later")
    eng.after(lambda: "alive", 0, job_id="after")  # the same worker thread goes on
    assert eng.wait_idle()
    for job_id in ("now", "later"):
        info = eng.get(job_id)
        assert info.state == "failed" and "SystemExit" in (info.last_error or ""), info
    assert eng.get("after").last_result == "alive"


def settle(eng) -> None:
    """``wait_idle``: a catch-up occurrence that a completion made due wakes the
    dispatcher itself (it once waited for something else to)."""
    assert eng.wait_idle()


@pytest.mark.parametrize("policy", list(Misfire))
def test_misfire_policies_apply_to_async_recurring_jobs_as_to_sync_ones(make_engine, clock, policy):
    eng = make_engine(2)
    seen: dict[str, list[int]] = {"sync": [], "async": []}

    def sync_tick() -> None:
        seen["sync"].append(current_invocation().scheduled_ms)

    async def async_tick() -> None:
        await asyncio.sleep(0)
        seen["async"].append(current_invocation().scheduled_ms)

    t0 = clock.now()
    for job_id, fn in (("sync", sync_tick), ("async", async_tick)):
        eng.every(fn, 10, job_id=job_id, anchor=t0, misfire=policy, misfire_grace=1)
    clock.advance(35)  # three occurrences missed by far more than the grace
    settle(eng)
    clock.advance(5)  # the next occurrence, on time
    settle(eng)
    assert seen["async"] == seen["sync"], (eng.get("async"), eng.get("sync"))
    ms = round(t0 * 1000)
    missed = [ms + 10_000, ms + 20_000, ms + 30_000]
    expected = {
        Misfire.SKIP: [ms + 40_000],
        Misfire.RUN_ONCE: [ms + 30_000, ms + 40_000],
        Misfire.CATCH_UP: [*missed, ms + 40_000],
    }[policy]
    assert seen["async"] == expected
    if policy is not Misfire.CATCH_UP:
        assert eng.get("async").skipped


def test_shutdown_waits_for_running_coroutines_within_its_timeout(make_engine):
    eng = make_engine(2)
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    async def slow() -> None:
        started.set()
        while not release.is_set():
            await asyncio.sleep(0.001)
        finished.set()

    eng.after(slow, 0, job_id="slow")
    assert started.wait(WAIT)
    threading.Timer(0.05, release.set).start()
    eng.shutdown(wait=True, timeout=WAIT)
    assert finished.is_set()  # waited for it


def test_shutdown_with_a_timeout_returns_while_a_coroutine_still_runs(make_engine):
    eng = make_engine(1)
    started, release = threading.Event(), threading.Event()

    async def stuck() -> None:
        started.set()
        while not release.is_set():
            await asyncio.sleep(0.001)

    eng.after(stuck, 0, job_id="stuck")
    assert started.wait(WAIT)
    t0 = time.monotonic()
    eng.shutdown(wait=True, timeout=0.2)
    assert 0.15 <= time.monotonic() - t0 < WAIT  # waited its timeout, then returned
    release.set()


def test_the_eager_start_keeps_asyncio_rules(make_engine):
    """A job's first step runs before its loop is entered: it still has a current task
    (``asyncio.timeout``, ``TaskGroup``), a running loop, and its own context."""
    eng = make_engine(1)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[object] = []

    async def job() -> str:
        seen.append(asyncio.current_task() is not None)
        seen.append(asyncio.get_running_loop().is_running())  # a library may check it
        var.set("job")  # must not leak into the worker thread or the next job
        if sys.version_info < (3, 11):  # neither asyncio.timeout nor TaskGroup yet
            return await asyncio.wait_for(
                asyncio.create_task(asyncio.sleep(0, result=current_invocation().job_id)), 5
            )
        async with asyncio.timeout(5):
            async with asyncio.TaskGroup() as group:
                child = group.create_task(asyncio.sleep(0, result=current_invocation().job_id))
        return child.result()

    async def next_job() -> str:
        return var.get()

    eng.after(job, 0, job_id="j")
    eng.after(next_job, 0, job_id="n")
    assert eng.wait_idle()
    assert eng.get("j").last_result == "j" and seen == [True, True]
    assert eng.get("n").last_result == "unset"


def test_an_async_timeout_cancels_a_job_that_never_suspended_before(make_engine):
    eng = make_engine(1)

    async def waits() -> None:
        await asyncio.wait_for(asyncio.sleep(3600), timeout=0.01)

    eng.after(waits, 0, job_id="w")
    assert eng.wait_idle(WAIT)
    assert "TimeoutError" in (eng.get("w").last_error or "")


@pytest.mark.parametrize("where", ["first step", "after an await"])
def test_blocking_code_in_an_async_job_shows_as_loop_lag(where):
    with JobScheduler(1) as s:
        done = threading.Event()

        async def blocks() -> None:
            if where == "after an await":
                await asyncio.sleep(0.001)
            time.sleep(0.2)  # blocking: the loop can run nothing meanwhile
            done.set()

        async def polite() -> None:
            await asyncio.sleep(0.001)

        s.schedule(polite, 0)
        s.schedule(blocks, 0)
        assert done.wait(WAIT)
        s.engine.wait_idle(WAIT)
        lag = s.stats().loop_lag
        assert lag.samples == 2 and lag.max >= 0.15, lag
        assert s.engine.loop_lag() == lag


def test_sync_jobs_report_no_loop_lag():
    with JobScheduler(1) as s:
        s.schedule(lambda: time.sleep(0.01), 0)
        s.engine.wait_idle(WAIT)
        assert s.stats().loop_lag.samples == 0


def test_loop_lag_is_a_prometheus_histogram(make_engine):
    pytest.importorskip("prometheus_client")
    from scheduler.metrics import PrometheusMetrics

    metrics = PrometheusMetrics(namespace="ns")
    eng = make_engine(1, metrics=metrics)

    async def blocks() -> None:
        time.sleep(0.05)

    eng.after(blocks, 0, job_id="b")
    assert eng.wait_idle()
    count = metrics.registry.get_sample_value(
        "duetime_loop_lag_seconds_count", {"namespace": "ns", "lane": "default"}
    )
    total = metrics.registry.get_sample_value(
        "duetime_loop_lag_seconds_sum", {"namespace": "ns", "lane": "default"}
    )
    assert count == 1 and total >= 0.04


def test_scheduling_from_a_coroutine_job_without_blocking_its_loop(make_engine):
    """The documented way (docs/guarantees.md): ``await asyncio.to_thread(engine.after,
    ...)`` (or an ``AsyncClient`` for a shared store): the job's other tasks go on."""
    eng = make_engine(2)
    ticks: list[int] = []
    done = threading.Event()

    async def parent() -> None:
        async def ticker() -> None:
            while True:
                ticks.append(1)
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = len(ticks)
        child = await asyncio.to_thread(eng.after, lambda: None, 3600, job_id="child")
        assert await asyncio.to_thread(eng.cancel, child) is True
        assert len(ticks) > before  # the loop ran the ticker while the calls ran
        t.cancel()
        done.set()

    eng.after(parent, 0, job_id="p")
    assert done.wait(WAIT) and eng.wait_idle()
    assert eng.get("p").state == "succeeded"
    assert eng.get("child").state == "cancelled"


def test_an_async_jobs_task_is_named_after_its_job(make_engine):
    eng = make_engine(1)
    names: list[str] = []

    async def job() -> None:
        names.append(asyncio.current_task().get_name())  # type: ignore[union-attr]
        await asyncio.sleep(0)
        names.append(asyncio.current_task().get_name())  # type: ignore[union-attr]

    eng.after(job, 0, job_id="nightly-report")
    assert eng.wait_idle()
    assert names == ["nightly-report", "nightly-report"]


class LoopLags(Metrics):
    """Records what reaches each loop-lag hook."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, float]]] = []
        self.single: list[tuple[str, float]] = []

    def loop_lag(self, lane, seconds):
        self.single.append((lane, seconds))

    def loop_lag_many(self, lags):
        self.batches.append(list(lags))


def test_loop_lags_reach_the_metrics_in_batches_and_a_failures_at_once(make_engine, clock):
    metrics = LoopLags()
    eng = make_engine(2, metrics=metrics)

    async def ok() -> None:
        pass

    async def fails() -> None:
        raise ValueError("no")

    for _ in range(30):
        eng.after(ok, 1)
    eng.after(fails, 1, job_id="f")
    clock.advance(1)  # all due at once: claimed and acknowledged in batches
    assert eng.wait_idle()
    lags = [lag for batch in metrics.batches for lag in batch]
    assert len(lags) == 30 and len(metrics.batches) < 30  # the successes', per flush
    assert all(lane == "default" and 0.0 <= s < WAIT for lane, s in lags)
    assert [lane for lane, _ in metrics.single] == ["default"]  # the failure's, at once
    assert eng.loop_lag().samples == 31


def test_the_default_loop_lag_batch_hook_calls_the_per_job_hook():
    seen: list[tuple[str, float]] = []

    class PerJob(Metrics):
        def loop_lag(self, lane, seconds):
            seen.append((lane, seconds))

    PerJob().loop_lag_many([("a", 0.5), ("b", 0.25)])
    Metrics().loop_lag_many([("a", 0.5)])  # the base class records nothing
    assert seen == [("a", 0.5), ("b", 0.25)]


def test_blocking_code_shows_as_loop_lag_on_prometheus_in_a_batch(make_engine):
    pytest.importorskip("prometheus_client")
    from scheduler.metrics import PrometheusMetrics

    metrics = PrometheusMetrics(namespace="ns")
    eng = make_engine(1, metrics=metrics)

    async def quick() -> None:
        pass

    async def blocks() -> None:
        time.sleep(0.05)

    for _ in range(5):
        eng.after(quick, 0)
    eng.after(blocks, 0)
    assert eng.wait_idle()
    labels = {"namespace": "ns", "lane": "default"}
    count = metrics.registry.get_sample_value("duetime_loop_lag_seconds_count", labels)
    fast = metrics.registry.get_sample_value(
        "duetime_loop_lag_seconds_bucket", {**labels, "le": "0.025"}
    )
    assert count == 6 and fast == 5


def test_a_job_that_closes_its_loop_leaves_a_working_one_for_the_next(make_engine):
    eng = make_engine(1)

    async def closes() -> None:
        asyncio.get_running_loop().close()

    async def suspends() -> str:
        await asyncio.sleep(0.001)
        return "ran"

    eng.after(closes, 0, job_id="c")
    assert eng.wait_idle()
    eng.after(suspends, 0, job_id="s")
    assert eng.wait_idle()
    assert eng.get("s").last_result == "ran"


@pytest.mark.parametrize("pause", [0, 0.12], ids=["one-step", "past-two-lag-probes"])
def test_a_finished_async_jobs_task_is_freed_at_once_not_at_a_collection(make_engine, pause):
    """A job that suspended leaves no task behind: no reference cycle holds it (the
    token's cancel hook reaching the task, whose context holds the token; the lag probes'
    handles) until the collector runs, while every later suspending job walks the tasks
    asyncio still lists."""
    import gc
    import weakref

    eng = make_engine(1)
    refs: list[weakref.ref[asyncio.Task[None]]] = []

    async def job() -> None:
        refs.append(weakref.ref(asyncio.current_task()))  # type: ignore[arg-type]
        await asyncio.sleep(pause)

    gc.disable()
    try:
        eng.after(job, 0, job_id="suspends")
        assert eng.wait_idle()
        assert len(refs) == 1
        assert refs[0]() is None, gc.get_referrers(refs[0]())
    finally:
        gc.enable()


def test_a_worker_threads_event_loop_is_closed_when_the_thread_ends(make_engine):
    """Each worker thread keeps one event loop for its async jobs; it was never closed,
    so its selector and self-pipe stayed open until a garbage collection, which warned
    "unclosed event loop" (ResourceWarning)."""
    eng = make_engine(2)
    seen: list[asyncio.AbstractEventLoop] = []

    async def job() -> None:
        seen.append(asyncio.get_running_loop())

    for i in range(4):
        eng.after(job, 0, job_id=f"j{i}")
    assert eng.wait_idle()
    assert seen and not any(loop.is_closed() for loop in seen)
    eng.shutdown(wait=True, timeout=5)
    assert all(loop.is_closed() for loop in seen)
