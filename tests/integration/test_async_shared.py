"""Issue 14 (items 2 and 3) on a shared store: each guarantee of ``async def`` jobs is
pinned by one test body run on the in-process store, on a real ``redis-server`` and on
fakeredis (the same Lua, in process; its missing INFO command, which an engine reads
first for its server checks, is stood in for by a conforming server's reply).

A shared store runs registered tasks only, with JSON arguments (never pickle), so the jobs
here are module-level ``@task``s that report to their test's ``Board``, found by the
``token`` in their kwargs. The memory-only versions, with local closures, are
tests/unit/test_async_jobs.py and test_async_loop.py; the assertions here mirror theirs.
Events and the fake clock synchronise; nothing sleeps to wait."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler import AsyncClient, Misfire, RetryPolicy, Scheduler, current_invocation, task
from scheduler.stores.memory import MemoryStore
from scheduler.testing import FakeClock
from tests.fakeredis_fixtures import fakeredis_client
from tests.helpers import WAIT

T = "tests.async_shared."
KINDS = [
    "memory",
    pytest.param("fakeredis", marks=pytest.mark.fakeredis),
    pytest.param("redis", marks=pytest.mark.redis),
]


@dataclass
class Board:
    """What one test's jobs report: their runs (label, fake time, scheduled ms, attempt)
    and named events; and what they need: the engine, the clock, an ``AsyncClient``."""

    clock: FakeClock
    store: Any
    url: str | None = None  # a real Redis: the jobs open their own AsyncClient on it
    namespace: str = "default"
    engine: Any = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: list[tuple[str, float, int, int]] = field(default_factory=list)
    flags: defaultdict[str, threading.Event] = field(
        default_factory=lambda: defaultdict(threading.Event)
    )

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def record(self, label: str) -> None:
        inv = current_invocation()
        with self.lock:
            self.runs.append((label, self.clock.now(), inv.scheduled_ms, inv.attempt))
            flag = self.flags[label]
            self.changed.notify_all()
        flag.set()

    def wait_runs(self, label: str, count: int) -> bool:
        """Wait until ``label`` ran ``count`` times (True), or ``WAIT`` seconds."""
        with self.lock:
            ran = lambda: sum(run[0] == label for run in self.runs) >= count  # noqa: E731
            return self.changed.wait_for(ran, WAIT)

    def flag(self, name: str) -> threading.Event:
        with self.lock:
            return self.flags[name]

    def labels(self) -> list[str]:
        with self.lock:
            return [run[0] for run in self.runs]

    def client(self) -> AsyncClient:
        if self.url is None:
            return AsyncClient(self.store)  # the in-process store: through a thread
        return AsyncClient(self.url, namespace=self.namespace)


BOARDS: dict[str, Board] = {}  # token -> the board of the test that runs
FAKE_INFO = {"redis_version": "7.2.0", "maxmemory_policy": "noeviction", "aof_enabled": 1}


# ---- the registered tasks ---------------------------------------------------------------


@task(T + "record")
async def record(token: str, label: str) -> str:
    await asyncio.sleep(0)  # it suspends: the loop, not the eager first step, ends it
    BOARDS[token].record(label)
    return label


@task(T + "record_sync")
def record_sync(token: str, label: str) -> str:
    BOARDS[token].record(label)
    return label


@task(T + "fail")
async def fail(how: str) -> None:
    if how == "error":
        raise ValueError("boom")
    if how == "cancel":
        raise asyncio.CancelledError()  # the job's own, not a cancellation of it
    if how == "exit":
        raise SystemExit(3)
    await asyncio.sleep(0)
    raise SystemExit(4)  # after a suspension: out of the loop's run, not the first step


@task(T + "flaky")
async def flaky(token: str) -> None:
    BOARDS[token].record("flaky")
    await asyncio.sleep(0)
    raise RuntimeError("try again")


@task(T + "hold")
async def hold(token: str, label: str, swallow: bool = False) -> str:
    """Runs until its ``.release`` flag is set (awaiting, so a cancel reaches it)."""
    b = BOARDS[token]
    b.record(label)
    b.flag(label + ".started").set()
    release = b.flag(label + ".release")
    try:
        while not release.is_set():
            await asyncio.sleep(0.001)
    except asyncio.CancelledError:
        b.flag(label + ".cancelled").set()
        if not swallow:
            raise
        return "swallowed it"
    return "released"


@task(T + "until_shutdown")
async def until_shutdown(token: str) -> str:
    b = BOARDS[token]
    b.flag("started").set()
    while not b.engine.closed:  # ends only once a shutdown has begun
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.005)
    b.flag("finished").set()
    return "finished"


@task(T + "stop_from_inside")
async def stop_from_inside(token: str) -> str:
    b = BOARDS[token]
    b.engine.shutdown(wait=True, timeout=2 * WAIT)  # its own thread is not waited for
    b.flag("returned").set()
    return "stopped"


@task(T + "parent")
async def parent(token: str, via: str) -> list[bool]:
    """Schedules a child that runs and one it cancels, without blocking its loop: through
    ``asyncio.to_thread(engine.after, ...)`` or an ``AsyncClient`` opened in the job."""
    b = BOARDS[token]
    ticks: list[int] = []

    async def ticker() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = len(ticks)
    now, eng = b.clock.now(), b.engine
    kw = {"token": token}
    if via == "thread":
        await asyncio.to_thread(
            eng.after, T + "record", 0, kwargs={**kw, "label": "child"}, job_id="child"
        )
        doomed = await asyncio.to_thread(
            eng.after, T + "record", 3600, kwargs={**kw, "label": "doomed"}, job_id="doomed"
        )
        cancelled = await asyncio.to_thread(eng.cancel, doomed)
    else:
        async with b.client() as c:
            await c.enqueue(
                T + "record", at=now, allow_past=True, kwargs={**kw, "label": "child"},
                job_id="child",
            )  # fmt: skip
            doomed = await c.enqueue(
                T + "record", delay=3600, kwargs={**kw, "label": "doomed"}, job_id="doomed"
            )
            cancelled = await c.cancel(doomed)
    ticked = len(ticks) > before  # the loop ran the ticker while the calls ran
    t.cancel()
    return [cancelled, ticked]


# ---- fixtures -----------------------------------------------------------------------------


@pytest.fixture(params=KINDS)
def board(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Board]:
    """A board on a fresh store of each kind, on the fake clock (a Redis store is told the
    fake time instead of reading Redis ``TIME``); ``start`` makes its engine."""
    if request.param == "memory":
        b = Board(clock, MemoryStore(clock))
    elif request.param == "fakeredis":
        from scheduler.stores.redis import RedisStore

        r = fakeredis_client()
        # fakeredis has no INFO, which an engine reads first (server checks, not pinned
        # here): the reply of a conforming server stands in for it
        r.info = lambda *a, **k: dict(FAKE_INFO)
        b = Board(clock, RedisStore(r, "fake", clock=clock))
    else:
        from scheduler.stores.redis import RedisStore

        url, ns = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_ns")
        b = Board(clock, RedisStore(url, ns, clock=clock), url=url, namespace=ns)
    BOARDS[b.token] = b
    yield b
    if b.engine is not None:
        b.engine.shutdown(wait=True, timeout=WAIT)
    del BOARDS[b.token]
    if request.param != "memory":
        b.store.close()


def start(b: Board, num_workers: int = 1) -> tuple[Scheduler, dict[str, str]]:
    """The test's engine on its store, and the kwargs that lead its jobs to its board."""
    b.engine = Scheduler(num_workers, store=b.store, clock=b.clock)
    return b.engine, {"token": b.token}


# ---- the guarantees -------------------------------------------------------------------------


def test_async_jobs_never_start_early_and_equal_due_times_keep_fifo_order(board):
    eng, kw = start(board, 1)
    t0 = board.clock.now()
    for label in ("c", "a", "b"):  # enqueue order is not the ids' order
        eng.after(T + "record", 10, kwargs={**kw, "label": label}, job_id=label)
    board.clock.advance(9.999)
    assert eng.wait_idle() and board.labels() == []  # not one millisecond early
    board.clock.advance(0.001)
    assert eng.wait_idle()
    assert board.labels() == ["c", "a", "b"]
    assert all(t >= t0 + 10 for _, t, _, _ in board.runs)
    assert {eng.get(label).state for label in "abc"} == {"succeeded"}


def test_failures_of_an_async_job_are_isolated_and_recorded(board):
    eng, kw = start(board, 1)  # one worker thread, one event loop, for all of them
    cases = {"error": "ValueError: boom", "cancel": "CancelledError"}
    cases.update(exit="SystemExit", exit_later="SystemExit")
    for how in cases:
        eng.after(T + "fail", 0, kwargs={"how": how}, job_id=how)
    eng.after(T + "record", 0, kwargs={**kw, "label": "after"}, job_id="after")
    assert eng.wait_idle()
    for how, error in cases.items():
        info = eng.get(how)
        assert info.state == "failed" and error in (info.last_error or ""), info
        assert info.runs == 0 and info.failures == 1, info
    assert board.labels() == ["after"] and eng.get("after").last_result == "after"


def test_async_failures_are_retried_then_dead_lettered(board):
    eng, kw = start(board)
    retry = RetryPolicy(max_attempts=3, backoff=1, jitter=0)
    eng.after(T + "flaky", 0, kwargs=kw, job_id="f", retry=retry)
    for _ in range(5):
        assert eng.wait_idle()
        board.clock.advance(10)
    assert eng.wait_idle()
    info = eng.get("f")
    assert [attempt for *_, attempt in board.runs] == [1, 2, 3]
    assert info.state == "failed" and len(info.dead_letters) == 1, info
    assert "RuntimeError: try again" in (info.last_error or "")


def test_an_async_recurring_job_keeps_its_grid_and_skips_overlaps(board):
    eng, kw = start(board, 2)
    t0 = board.clock.now()
    eng.every(T + "hold", 5, kwargs={**kw, "label": "t"}, job_id="t", anchor=t0)
    board.clock.advance(5)
    assert board.flag("t.started").wait(WAIT)
    # parked after that claim first: else it may park after the next advance, counting
    # its next due time from then (late, never early) and the test would see no skip yet
    assert eng._dispatcher.wait_quiet(WAIT)
    board.clock.advance(5)  # due while the first run runs: skipped (overlap="skip")
    assert eng._dispatcher.wait_quiet(WAIT)  # it has claimed (skipped) it and sleeps again
    assert any(s.reason == "overlap" for s in eng.get("t").skipped), eng.get("t")
    board.flag("t.release").set()
    assert eng.wait_idle()
    board.clock.advance(5)
    assert eng.wait_idle()
    ms = round(t0 * 1000)
    assert [(t, sched) for _, t, sched, _ in board.runs] == [
        (t0 + 5, ms + 5_000),
        (t0 + 15, ms + 15_000),  # on the anchor's grid, whatever the first run took
    ]


@pytest.mark.parametrize("policy", list(Misfire))
def test_misfire_policies_apply_to_async_recurring_jobs_as_to_sync_ones(board, policy):
    eng, kw = start(board, 2)
    t0 = board.clock.now()
    anchor = t0 - 7  # in the past: the grid is t0+3, t0+13, ... (not "now + k*interval")
    for label, name in (("sync", "record_sync"), ("async", "record")):
        eng.every(
            T + name, 10, kwargs={**kw, "label": label}, job_id=label, anchor=anchor,
            misfire=policy, misfire_grace=1,
        )  # fmt: skip
    ms = round(t0 * 1000)
    missed = [ms + 3_000, ms + 13_000, ms + 23_000, ms + 33_000]
    expected = {
        Misfire.SKIP: [ms + 43_000],
        Misfire.RUN_ONCE: [ms + 33_000, ms + 43_000],
        Misfire.CATCH_UP: [*missed, ms + 43_000],
    }[policy]
    # each catch-up run is made due by the completion of the one before: over Redis the
    # engine's own dispatcher hears of it by pub/sub only, which wait_idle cannot see
    # coming, so the test waits for the runs it expects, then for idleness
    board.clock.advance(35)  # four occurrences missed by more than the grace
    for label in ("sync", "async"):
        assert board.wait_runs(label, len(expected) - 1), board.runs
    assert eng.wait_idle()
    board.clock.advance(8)  # the next one, t0+43, on time
    for label in ("sync", "async"):
        assert board.wait_runs(label, len(expected)), board.runs
    assert eng.wait_idle()
    runs = {"sync": [], "async": []}  # type: dict[str, list[int]]
    for label, _, scheduled, _ in board.runs:
        runs[label].append(scheduled)
    assert runs["async"] == runs["sync"], (eng.get("async"), eng.get("sync"))
    assert runs["async"] == expected
    if policy is not Misfire.CATCH_UP:
        assert eng.get("async").skipped


@pytest.mark.parametrize("swallow", [False, True])
def test_a_timeout_cancels_the_coroutine_and_is_recorded_as_a_timeout(board, swallow):
    eng, kw = start(board)
    kwargs = {**kw, "label": "slow", "swallow": swallow}
    eng.after(T + "hold", 0, kwargs=kwargs, job_id="slow", timeout=5)
    assert board.flag("slow.started").wait(WAIT)
    board.clock.advance(4.999)
    assert eng._dispatcher.wait_quiet(WAIT) and not board.flag("slow.cancelled").is_set()
    board.clock.advance(0.001)
    assert board.flag("slow.cancelled").wait(WAIT)
    assert eng.wait_idle()
    info = eng.get("slow")
    assert info.state == "failed" and "timeout" in (info.last_error or ""), info
    assert info.runs == 0 and info.last_result is None, info


@pytest.mark.parametrize("swallow", [False, True])
def test_cancel_with_interrupt_ends_the_coroutine_as_interrupted_never_a_success(board, swallow):
    eng, kw = start(board)
    kwargs = {**kw, "label": "p", "swallow": swallow}
    eng.after(T + "hold", 0, kwargs=kwargs, job_id="p", retry=RetryPolicy(max_attempts=3))
    assert board.flag("p.started").wait(WAIT)
    eng.cancel("p", interrupt=True, wait=True, timeout=WAIT)
    assert board.flag("p.cancelled").is_set()  # it saw CancelledError (and maybe swallowed it)
    assert eng.wait_idle()  # the outcome is recorded once the worker is idle again
    info = eng.get("p")
    assert (info.state, info.runs, info.failures) == ("cancelled", 0, 0), info  # no success
    assert info.last_result is None and info.last_error is None and info.dead_letters == ()
    kinds = [e.kind for e in eng.events(100) if e.job_id == "p"]
    assert "interrupted" in kinds, kinds
    assert not {"succeeded", "failed", "retried", "dead_lettered"} & set(kinds), kinds
    assert board.labels() == ["p"]  # not run again


@pytest.mark.parametrize("via", ["thread", "client"])
def test_an_async_job_schedules_and_cancels_without_blocking_its_loop(board, via):
    eng, kw = start(board, 2)
    eng.after(T + "parent", 0, kwargs={**kw, "via": via}, job_id="p")
    assert board.flag("child").wait(WAIT)  # it ran (a shared store's wake-up may trail)
    assert eng.wait_idle()
    assert eng.get("p").state == "succeeded", eng.get("p")
    assert eng.get("p").last_result == [True, True]  # cancelled; the loop went on meanwhile
    assert eng.get("child").state == "succeeded"
    assert eng.get("doomed").state == "cancelled" and "doomed" not in board.labels()


def test_shutdown_waits_for_a_running_coroutine(board):
    eng, kw = start(board, 2)
    eng.after(T + "until_shutdown", 0, kwargs=kw, job_id="u")
    assert board.flag("started").wait(WAIT)
    eng.shutdown(wait=True, timeout=WAIT)
    assert board.flag("finished").is_set()  # it ends only after shutdown began: waited
    info = eng.get("u")
    assert info.state == "succeeded" and info.last_result == "finished", info


def test_shutdown_with_a_timeout_returns_while_a_coroutine_still_runs(board):
    eng, kw = start(board, 1)
    eng.after(T + "hold", 0, kwargs={**kw, "label": "stuck"}, job_id="stuck")
    assert board.flag("stuck.started").wait(WAIT)
    t0 = time.monotonic()
    eng.shutdown(wait=True, timeout=0.2)
    assert 0.15 <= time.monotonic() - t0 < WAIT  # waited its timeout, then returned
    assert not board.flag("stuck.cancelled").is_set()  # shutdown does not cancel it
    board.flag("stuck.release").set()
    assert eng._lanes.join(WAIT)  # it ends on its own (before the store is closed)


def test_a_shutdown_called_from_inside_an_async_job_does_not_deadlock(board):
    eng, kw = start(board, 2)
    eng.after(T + "stop_from_inside", 0, kwargs=kw, job_id="s")
    assert board.flag("returned").wait(WAIT)
    assert eng.closed
    assert eng._lanes.join(WAIT)
    info = eng.get("s")
    assert info.state == "succeeded" and info.last_result == "stopped", info
