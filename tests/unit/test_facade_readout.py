"""The facades grow up, keyword-only (issue 13, bullet 6): lanes and ``lane=`` keep long
jobs from starving short ones, and ``stats()`` reads out the dispatch delay and what
waits per lane, with no optional dependency. The facades' positional signatures stay."""

from __future__ import annotations

import inspect
import pathlib
import subprocess
import sys
import threading

import pytest

from scheduler import JobScheduler, MemoryStore, RecurringJobScheduler
from scheduler.model import After
from scheduler.readout import Lag, LagWindow
from tests.helpers import WAIT, spec

POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
KEYWORD = inspect.Parameter.KEYWORD_ONLY


def params(fn) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_spec_3_signatures_are_unchanged_and_every_addition_is_keyword_only():
    for facade in (JobScheduler, RecurringJobScheduler):
        assert params(facade.__init__)[:2] == [("self", POSITIONAL), ("num_workers", POSITIONAL)]
        assert {n for n, k in params(facade.__init__)[2:] if k is KEYWORD} == {
            "store",
            "clock",
            "lanes",
            "lane_timeouts",
        }
        assert all(k is KEYWORD for _, k in params(facade.__init__)[2:])
        assert params(facade.shutdown) == [("self", POSITIONAL), ("wait", POSITIONAL)]
        assert params(facade.stats) == [("self", POSITIONAL)]
    assert params(JobScheduler.schedule) == [
        ("self", POSITIONAL),
        ("job", POSITIONAL),
        ("delay_seconds", POSITIONAL),
        ("lane", KEYWORD),
    ]
    assert params(RecurringJobScheduler.schedule) == [
        ("self", POSITIONAL),
        ("job_id", POSITIONAL),
        ("fn", POSITIONAL),
        ("interval_seconds", POSITIONAL),
        ("lane", KEYWORD),
    ]
    assert params(JobScheduler.cancel) == [("self", POSITIONAL), ("job_id", POSITIONAL)]
    assert params(RecurringJobScheduler.deschedule) == [
        ("self", POSITIONAL),
        ("job_id", POSITIONAL),
    ]


# ---- lanes ------------------------------------------------------------------------------


def test_a_long_job_in_its_own_lane_does_not_starve_short_ones(clock):
    short_ran, long_started, release = threading.Event(), threading.Event(), threading.Event()
    with JobScheduler(1, clock=clock, lanes={"slow": 1}) as s:
        s.schedule(lambda: (long_started.set(), release.wait(WAIT)), 0, lane="slow")
        assert long_started.wait(WAIT)
        s.schedule(short_ran.set, 0)  # the default lane's one worker is free
        assert short_ran.wait(WAIT)
        release.set()


def test_without_lanes_the_short_job_waits_behind_the_long_one(clock):
    """The contrast that makes the test above mean something."""
    short_ran, long_started, release = threading.Event(), threading.Event(), threading.Event()
    with JobScheduler(1, clock=clock) as s:
        s.schedule(lambda: (long_started.set(), release.wait(WAIT)), 0)
        assert long_started.wait(WAIT)
        s.schedule(short_ran.set, 0)
        assert not short_ran.wait(0.1)
        release.set()
        assert short_ran.wait(WAIT)


def test_recurring_jobs_run_on_their_lane(clock):
    threads: list[str] = []
    with RecurringJobScheduler(1, clock=clock, lanes={"reports": 2}) as r:
        r.schedule(
            "rep", lambda: threads.append(threading.current_thread().name), 1, lane="reports"
        )
        r.schedule_cron("cron", lambda: None, "* * * * *", lane="reports")
        clock.advance(1)
        assert r.engine.wait_idle()
        assert r.engine.get("cron").lane == "reports"
    assert len(threads) == 1 and threads[0].startswith("duetime-reports-")


def test_lane_timeouts_apply_to_facade_jobs(clock):
    with JobScheduler(1, clock=clock, lanes={"slow": 1}, lane_timeouts={"slow": "5s"}) as s:
        jid = s.schedule(lambda: None, 0, lane="slow")
        assert s.engine.wait_idle()
        assert s.engine.get(str(jid)).runs == 1


def test_an_unknown_lane_is_refused_and_nothing_is_written(clock):
    with JobScheduler(1, clock=clock) as s, RecurringJobScheduler(1, clock=clock) as r:
        with pytest.raises(ValueError, match="unknown lane 'slow'"):
            s.schedule(lambda: None, 1, lane="slow")
        with pytest.raises(ValueError, match="unknown lane 'slow'"):
            r.schedule("x", lambda: None, 1, lane="slow")
        assert s.engine.jobs() == [] and r.engine.jobs() == []


def test_upsert_in_another_lane_is_a_changed_definition(clock):
    ran: list[str] = []
    with RecurringJobScheduler(1, clock=clock, lanes={"slow": 1}) as r:
        fn = lambda: ran.append(threading.current_thread().name)  # noqa: E731
        r.schedule("x", fn, 10)
        clock.advance(5)
        r.schedule("x", fn, 10, lane="slow")  # replaced: new anchor = now
        clock.advance(5)
        assert r.engine.wait_idle()
        assert ran == []
        clock.advance(5)
        assert r.engine.wait_idle()
    assert len(ran) == 1 and ran[0].startswith("duetime-slow-")


# ---- stats() ----------------------------------------------------------------------------


def test_stats_of_an_idle_facade(clock):
    with JobScheduler(2, clock=clock, lanes={"slow": 1}) as s:
        st = s.stats()
    assert st.lag == Lag(0, 0.0, 0.0, 0.0, 0.0)
    assert {lane: (v.workers, v.busy, v.queued, v.due) for lane, v in st.lanes.items()} == {
        "default": (2, 0, 0, 0),
        "slow": (1, 0, 0, 0),
    }


def test_stats_show_the_delay_and_what_waits_per_lane(clock):
    """One worker, busy: three jobs due at +1 wait until +5. The read-out shows them
    queued and due while they wait, then a lag of 4 s for each."""
    started, release = threading.Event(), threading.Event()
    with JobScheduler(1, clock=clock, lanes={"slow": 1}) as s:
        s.schedule(lambda: (started.set(), release.wait(WAIT)), 0)
        assert started.wait(WAIT)
        for _ in range(3):
            s.schedule(lambda: None, 1)
        s.schedule(lambda: None, 60)
        clock.advance(1)
        st = s.stats()
        d = st.lanes["default"]
        assert (d.workers, d.busy, d.queued, d.due) == (1, 1, 4, 3)
        assert d.lag.samples == 1 and d.lag.max == 0.0  # only the first job was claimed
        clock.advance(4)
        release.set()
        assert s.engine.wait_idle()
        st = s.stats()
    d = st.lanes["default"]
    assert (d.busy, d.queued, d.due) == (0, 1, 0)
    assert d.lag == Lag(4, 4.0, 4.0, 4.0, 4.0)
    assert st.lag == d.lag
    assert st.lanes["slow"].lag.samples == 0


def test_a_job_scheduled_in_the_past_does_not_poison_the_read_out(clock):
    clock.advance(7200)
    with JobScheduler(1, clock=clock) as s:
        s.engine.at(lambda: None, clock.wall() - 3600)
        s.engine.at(lambda: None, 0, allow_past=True)  # 1970
        assert s.engine.wait_idle()
        assert s.stats().lag == Lag(2, 0.0, 0.0, 0.0, 0.0)


def test_recurring_stats(clock):
    with RecurringJobScheduler(2, clock=clock) as r:
        r.schedule("t", lambda: None, "1s")
        for _ in range(5):
            clock.advance(1)
            assert r.engine.wait_idle()
        st = r.stats()
    assert st.lag.samples == 5 and st.lag.max == 0.0
    assert st.lanes["default"].queued == 1  # the next occurrence


def test_lag_percentiles_are_nearest_rank_over_a_bounded_window():
    w = LagWindow(window=100)
    for i in range(1, 201):  # only the last 100 (101..200) are kept
        w.claimed("default", i / 1000)
    w.claimed("other", -0.5)  # a claim "before" its time (clock rounding) counts as 0
    lag = Lag.of(w.recent()["default"])
    assert lag == Lag(100, 0.151, 0.191, 0.2, 0.2)
    assert w.recent()["other"] == [0.0]


def test_memory_store_counts_pending_and_due_per_lane(clock):
    store = MemoryStore(clock)
    store.add(spec("a", After(0)))
    store.add(spec("b", After(10)))
    store.add(spec("c", After(0), lane="slow"))
    assert store.queue_depths() == {"default": (2, 1), "slow": (1, 1)}
    store.pause("a")
    assert store.queue_depths() == {"default": (1, 0), "slow": (1, 1)}


def test_stats_need_no_optional_dependency():
    """No redis-py, no prometheus-client: the read-out works on the standard library."""
    code = (
        "import sys\n"
        "sys.modules['redis'] = None; sys.modules['prometheus_client'] = None\n"
        "from scheduler import JobScheduler\n"
        "with JobScheduler(1) as s:\n"
        "    s.schedule(lambda: None, 0)\n"
        "    s.engine.wait_idle()\n"
        "    print(s.stats().lag.samples)\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr


def test_in_process_next_run_is_on_the_engines_monotonic_clock_as_documented():
    """JobInfo's docstring: in process, ``next_run`` is ``time.monotonic()`` seconds."""
    import time

    from scheduler import Scheduler
    from scheduler.model import JobInfo

    assert "time.monotonic()" in (JobInfo.__doc__ or "")
    with Scheduler(1) as engine:
        before = time.monotonic()
        engine.after(lambda: None, 3600, job_id="far")
        info = engine.get("far")
        assert info is not None and info.next_run is not None
        assert before + 3600 <= info.next_run <= time.monotonic() + 3600
        assert abs(info.next_run - engine.clock.now() - 3600) < 60
        wall = time.time() + info.next_run - time.monotonic()
        assert abs(wall - (time.time() + 3600)) < 60
