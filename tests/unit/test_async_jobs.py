"""Issue 14 (first step): `async def` jobs really run, in both stores; cancellation reaches
the coroutine and is recorded as what it was; what cannot run is refused or fails, and
nothing is ever reported as succeeded without having run."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading

import pytest

from scheduler import current_invocation, task
from scheduler.model import After, JobSpec, RetryPolicy, TaskRef
from tests.helpers import WAIT

ran: list[str] = []


@task("tests.async.add")
async def add_async(a: int, b: int) -> int:
    await asyncio.sleep(0)
    ran.append("add")
    return a + b


def test_an_async_def_runs_in_process_and_its_result_is_recorded(make_engine):
    eng = make_engine(2)
    seen: list[object] = []

    async def job() -> str:
        await asyncio.sleep(0.001)
        inv = current_invocation()

        async def child() -> str:  # a task it spawns sees the invocation too
            return current_invocation().job_id

        seen.append((inv.job_id, await asyncio.create_task(child())))
        return "done"

    eng.after(job, 0, job_id="a")
    eng.after(lambda: "sync", 0, job_id="s")  # sync and async mix in one lane
    assert eng.wait_idle()
    assert eng.get("a").state == "succeeded" and eng.get("a").last_result == "done"
    assert eng.get("s").last_result == "sync"
    assert seen == [("a", "a")]


def test_an_async_registered_task_runs_through_every_store(make_engine, store):
    ran.clear()
    store.add(JobSpec("t", TaskRef("tests.async.add", '{"a": 2, "b": 3}'), After(0)))
    eng = make_engine(store=store)
    assert eng.wait_idle()
    eng.shutdown(wait=True)  # batched acks are recorded by then
    info = store.get("t")
    assert info.state == "succeeded" and info.last_result == 5 and ran == ["add"]


def test_failures_of_an_async_job_are_isolated_and_recorded(make_engine):
    eng = make_engine()

    async def boom() -> None:
        raise ValueError("boom")

    async def cancels_itself() -> None:
        raise asyncio.CancelledError()

    eng.after(boom, 0, job_id="boom")
    eng.after(cancels_itself, 0, job_id="self")
    eng.after(lambda: None, 0, job_id="after")
    assert eng.wait_idle()
    assert eng.get("boom").state == "failed" and "ValueError: boom" in eng.get("boom").last_error
    assert eng.get("self").state == "failed" and "CancelledError" in eng.get("self").last_error
    assert eng.get("after").state == "succeeded"


@pytest.mark.parametrize("swallow", [False, True])
def test_a_timeout_cancels_the_coroutine_and_is_recorded_as_a_timeout(make_engine, clock, swallow):
    eng = make_engine()
    started, saw_cancel = threading.Event(), threading.Event()

    async def slow() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            saw_cancel.set()
            if not swallow:
                raise
        return "pretended to finish"

    eng.after(slow, 0, job_id="slow", timeout=5)
    assert started.wait(WAIT)
    clock.advance(5)
    assert saw_cancel.wait(WAIT)
    assert eng.wait_idle()
    info = eng.get("slow")
    assert info.state == "failed" and "timeout" in info.last_error, info


@pytest.mark.parametrize("swallow", [False, True])
def test_cancel_with_interrupt_ends_the_coroutine_as_interrupted_never_a_success(
    make_engine, swallow, caplog
):
    """An operator's stop is no failure: no dead letter, no failure counted, no retry
    (though its policy allows one), logged at INFO; nor a success, even if the job
    swallows its CancelledError. Its end is an ``interrupted`` event."""
    caplog.set_level(logging.INFO, logger="duetime.workers")
    eng = make_engine()
    started = threading.Event()

    async def polite() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if not swallow:
                raise
            return "swallowed it"
        return "never"

    eng.after(polite, 0, job_id="p", retry=RetryPolicy(max_attempts=3, backoff=0))
    assert started.wait(WAIT)
    eng.cancel("p", interrupt=True, wait=True, timeout=WAIT)
    assert eng.wait_idle()  # the outcome is recorded once the worker is idle again
    info = eng.get("p")
    assert (info.state, info.runs, info.failures) == ("cancelled", 0, 0), info
    assert info.last_result is None and info.last_error is None and info.dead_letters == ()
    ends = [e for e in eng.events(100) if e.kind in ("succeeded", "failed", "interrupted")]
    assert [(e.kind, e.job_id, e.attempt) for e in ends] == [("interrupted", "p", 1)]
    assert ends[0].detail.startswith("interrupted by cancel(interrupt=True)")
    assert ("returned after its CancelledError" in ends[0].detail) is swallow
    assert not {"retried", "dead_lettered"} & {e.kind for e in eng.events(100)}
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if "job p " in r.getMessage()]
    assert [lvl for lvl, msg in logged if "interrupted:" in msg] == ["INFO"], logged
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], logged


def test_an_error_raised_while_stopping_is_still_a_failure(make_engine):
    """Only the interrupt's own cancellation is an interrupted end: a job that raises
    something else on its way out failed, as any error raised is recorded."""
    eng = make_engine()
    started = threading.Event()

    async def clumsy() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise ValueError("cleanup broke") from None

    eng.after(clumsy, 0, job_id="c")
    assert started.wait(WAIT)
    eng.cancel("c", interrupt=True, wait=True, timeout=WAIT)
    assert eng.wait_idle()
    info = eng.get("c")
    assert (info.state, info.failures) == ("cancelled", 1), info
    assert "ValueError: cleanup broke" in (info.last_error or "") and len(info.dead_letters) == 1


_sync_stop: dict[str, threading.Event] = {}


@task("tests.async.sync_stop")
def sync_stop(swallow: bool) -> str:
    _sync_stop["started"].set()
    if swallow:  # it never looks at its token; it is asked all the same
        assert _sync_stop["asked"].wait(WAIT)
    else:
        assert current_invocation().token.wait(WAIT)
    return "stopped"


@pytest.mark.parametrize("swallow", [False, True])
def test_a_sync_job_that_returns_when_interrupted_is_interrupted_like_an_async_one(
    make_engine, store, swallow, caplog
):
    """Issue 31: a sync job asked to stop by an interrupt that returns (polling its token,
    or ignoring it) ends as ``interrupted``, in events, counters and logs, as an async one
    does; it was recorded ``succeeded`` (runs 1) though its log said interrupted."""
    caplog.set_level(logging.INFO, logger="duetime.workers")
    eng = make_engine(store=store)
    _sync_stop.update(started=threading.Event(), asked=threading.Event())
    eng.after(
        "tests.async.sync_stop",
        0,
        kwargs={"swallow": swallow},
        job_id="s",
        retry=RetryPolicy(max_attempts=3, backoff=0),
    )
    assert _sync_stop["started"].wait(WAIT)
    eng.cancel("s", interrupt=True)
    _sync_stop["asked"].set()
    assert eng.wait_idle()
    info = eng.get("s")
    assert (info.state, info.runs, info.failures) == ("cancelled", 0, 0), info
    assert info.last_result is None and info.last_error is None and info.dead_letters == ()
    ends = [e for e in eng.events(100) if e.kind in ("succeeded", "failed", "interrupted")]
    assert [(e.kind, e.job_id, e.attempt) for e in ends] == [("interrupted", "s", 1)]
    assert ends[0].detail.startswith("interrupted by cancel(interrupt=True)")
    assert not {"retried", "dead_lettered"} & {e.kind for e in eng.events(100)}
    logged = [r for r in caplog.records if "job s " in r.getMessage()]
    assert [r.levelname for r in logged if "interrupted:" in r.getMessage()] == ["INFO"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], logged


def test_a_sync_job_that_times_out_and_returns_is_still_a_failure(make_engine, clock):
    """Only an interrupt makes a returning sync job ``interrupted``: its timeout is what
    it was, a failure (retried, then dead-lettered)."""
    eng = make_engine()
    started = threading.Event()

    def slow() -> str:
        started.set()
        assert current_invocation().token.wait(WAIT)
        return "late"

    eng.after(slow, 0, job_id="t", timeout=1)
    assert started.wait(WAIT)
    clock.advance(1)
    assert eng.wait_idle()
    info = eng.get("t")
    assert (info.state, info.runs, info.failures) == ("failed", 0, 1), info
    assert "timeout" in (info.last_error or "")
    assert "interrupted" not in {e.kind for e in eng.events(100)}


async def agen():
    yield 1


async def coro_fn() -> int:
    return 1


def gen_fn():
    yield 1


class YieldingCallable:
    def __call__(self):
        yield 1


class AsyncCallable:
    async def __call__(self) -> int:
        return 7


def test_what_cannot_run_is_refused_when_scheduled_or_registered(make_engine):
    eng = make_engine()
    coro = coro_fn()
    with pytest.raises(TypeError, match="awaitable .*pass the function itself"):
        eng.after(coro, 0)
    with pytest.raises(TypeError, match="async generator"):
        eng.after(agen, 0)
    with pytest.raises(TypeError, match="async generator"):
        task("tests.async.gen")(agen)
    for sync_generator in (gen_fn, functools.partial(gen_fn), YieldingCallable()):
        with pytest.raises(TypeError, match="generator function: calling it runs none"):
            eng.after(sync_generator, 0)  # was "succeeded", its body never run
    with pytest.raises(TypeError, match="generator function"):
        task("tests.async.sync_gen")(gen_fn)
    assert eng.jobs() == []


@pytest.mark.parametrize(
    ("kind", "make", "outcome"),
    [
        ("sync function", lambda: lambda: 1, ("succeeded", 1)),
        ("async def", lambda: coro_fn, ("succeeded", 1)),
        ("partial of an async def", lambda: functools.partial(coro_fn), ("succeeded", 1)),
        ("object with an async __call__", AsyncCallable, ("succeeded", 7)),
        ("lambda returning a coroutine", lambda: lambda: coro_fn(), ("failed", None)),
        ("lambda returning a generator", lambda: lambda: gen_fn(), ("failed", None)),
    ],
)
def test_no_kind_of_callable_is_reported_as_succeeded_without_running(
    make_engine, kind, make, outcome
):
    eng = make_engine()
    eng.after(make(), 0, job_id="j")
    assert eng.wait_idle()
    info = eng.get("j")
    assert (info.state, info.last_result) == outcome, (kind, info)
    if outcome[0] == "failed":
        what = "a generator" if "generator" in kind else "an awaitable"
        assert f"returned {what} instead of running" in info.last_error


# ---- the other guarantees, for async jobs as for sync ones -----------------------------------


def test_async_jobs_never_start_early_and_equal_due_times_keep_fifo_order(make_engine, clock):
    eng = make_engine(1)
    order: list[tuple[str, float]] = []

    def make(label: str):
        async def job() -> None:
            order.append((label, clock.now()))

        return job

    t0 = clock.now()
    for label in ("a", "b", "c"):
        eng.after(make(label), 10, job_id=label)
    clock.advance(9.999)
    assert eng.wait_idle() and order == []  # not one millisecond early
    clock.advance(0.001)
    assert eng.wait_idle()
    assert [label for label, _ in order] == ["a", "b", "c"]
    assert all(t >= t0 + 10 for _, t in order)


def test_async_failures_are_retried_then_dead_lettered(make_engine, clock):
    from scheduler import RetryPolicy

    eng = make_engine()
    attempts: list[int] = []

    async def flaky() -> None:
        attempts.append(current_invocation().attempt)
        raise RuntimeError("try again")

    eng.after(flaky, 0, job_id="f", retry=RetryPolicy(max_attempts=3, backoff=1, jitter=0))
    for _ in range(5):
        assert eng.wait_idle()
        clock.advance(10)
    assert eng.wait_idle()
    info = eng.get("f")
    assert attempts == [1, 2, 3] and info.state == "failed" and len(info.dead_letters) == 1


def test_an_async_fixed_rate_job_runs_on_its_grid_and_skips_overlaps(make_engine, clock):
    eng = make_engine(2)
    started, release = threading.Event(), threading.Event()
    runs: list[float] = []

    async def tick() -> None:
        runs.append(clock.now())
        if len(runs) == 1:
            started.set()
            while not release.is_set():  # an overlap: still running at the next tick
                await asyncio.sleep(0.001)

    t0 = clock.now()
    eng.every(tick, 5, job_id="t", anchor=t0)
    clock.advance(5)
    assert started.wait(WAIT)
    clock.advance(5)  # due while the first run runs: skipped (overlap="skip")
    assert eng._dispatcher.wait_quiet(WAIT)  # it has claimed (skipped) it and sleeps again
    assert any(s.reason == "overlap" for s in eng.get("t").skipped)
    release.set()
    assert eng.wait_idle()
    clock.advance(5)
    assert eng.wait_idle()
    assert runs[0] == t0 + 5 and runs[-1] == t0 + 15 and len(runs) == 2
    assert any(s.reason == "overlap" for s in eng.get("t").skipped)


def test_an_async_job_may_schedule_cancel_and_shut_down_its_own_engine(make_engine):
    eng = make_engine(2)
    done = threading.Event()

    async def parent() -> str:
        child = eng.after(lambda: None, 3600, job_id="child")  # re-entrant: no deadlock
        assert eng.cancel(child) is True
        eng.shutdown(wait=True, timeout=5)  # from inside: its own task is not waited for
        done.set()
        return "ok"

    eng.after(parent, 0, job_id="p")
    assert done.wait(WAIT)


def test_what_an_async_job_leaves_running_is_cancelled_when_it_ends(make_engine):
    """Each worker thread reuses its event loop: a task the job spawned and did not await
    must not outlive the job (as with asyncio.run)."""
    eng = make_engine()
    orphan_cancelled = threading.Event()

    async def leaky() -> None:
        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                orphan_cancelled.set()
                raise

        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)

    eng.after(leaky, 0, job_id="leaky")
    assert eng.wait_idle()
    assert orphan_cancelled.is_set() and eng.get("leaky").state == "succeeded"
