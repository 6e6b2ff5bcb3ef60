"""Results in every store (docs/results.md): a watch of a job's outcome is told its end
(or reads it, when it ended before), the same way in process and on Redis; a handle
returns the value or raises ``JobFailed``; progress is token-checked and read back."""

from __future__ import annotations

import threading

import pytest

from scheduler.client import Client
from scheduler.errors import JobFailed, JobNotFoundError, ResultTimeoutError
from scheduler.model import After, Commit, Delivery, Outcome, RetryPolicy
from tests.helpers import every, spec

ALL = {"default": 100}


def claim_one(store, lease=30.0):
    batch = store.claim_due(ALL, lease, "owner-1")
    assert len(batch.claims) == 1, batch
    return batch.claims[0]


class Told:
    """A watch's delivery: the outcome, once."""

    def __init__(self) -> None:
        self.got: list[Outcome] = []
        self.event = threading.Event()

    def __call__(self, outcome: Outcome) -> None:
        self.got.append(outcome)
        self.event.set()

    def wait(self) -> Outcome:
        assert self.event.wait(5), "no outcome delivered"
        assert len(self.got) == 1
        return self.got[0]


def test_a_watch_is_told_a_success_and_reads_it_after(store, clock):
    store.add(spec("a", After(0)))
    told = Told()
    known, stop = store.watch("a", None, told)
    assert known is None
    c = claim_one(store)
    assert store.complete(c, {"n": [1, 2]}) is Commit.OK
    got = told.wait()
    stop()
    assert (got.job_id, got.state, got.value) == ("a", "succeeded", {"n": [1, 2]})
    known, stop = store.watch("a", None, Told())  # after the end: read, not waited for
    stop()
    assert known is not None and (known.state, known.value) == ("succeeded", {"n": [1, 2]})


def test_a_batch_of_successes_tells_only_the_watched_jobs(store, clock):
    for name in "abc":
        store.add(spec(name, After(0)))
    told = Told()
    _, stop = store.watch("b", None, told)
    claims = store.claim_due(ALL, 30.0, "owner-1").claims
    assert store.complete_many([(c, c.job_id) for c in claims]) == [Commit.OK] * 3
    got = told.wait()
    stop()
    assert (got.job_id, got.value) == ("b", "b")


def test_a_failure_after_its_retries_is_told_with_its_error(store, clock):
    store.add(spec("f", After(0)))
    told = Told()
    _, stop = store.watch("f", None, told)
    c = claim_one(store)
    store.fail(c, "ValueError: no", retry_in=1.0)  # a retry: not the end
    assert not told.event.wait(0.2)
    clock.advance(1)
    c = claim_one(store)
    store.fail(c, "ValueError: no way", retry_in=None)
    got = told.wait()
    stop()
    assert (got.state, got.error) == ("failed", "ValueError: no way")
    known, stop = store.watch("f", None, Told())
    stop()
    assert known is not None and (known.state, known.error) == ("failed", "ValueError: no way")


def test_a_timeout_is_its_own_state(store, clock):
    store.add(spec("t", After(0)))
    c = claim_one(store)
    store.fail(c, "InvocationTimeout: job ran past its timeout of 1s", retry_in=None)
    known, stop = store.watch("t", None, Told())
    stop()
    assert known is not None and known.state == "timed_out"


def test_a_cancelled_one_off_is_told(store, clock):
    store.add(spec("x", After(60)))
    told = Told()
    _, stop = store.watch("x", None, told)
    assert store.cancel("x")
    assert told.wait().state == "cancelled"
    stop()


def test_a_recurring_invocation_is_named_and_kept_for_its_handles(store, clock):
    store.add(every("r", 10))
    clock.advance(10)
    nxt, first = Told(), Told()
    _, stop_next = store.watch("r", None, nxt)
    c = claim_one(store)
    _, stop_first = store.watch("r", c.scheduled_ms, first)
    store.complete(c, 7)
    assert nxt.wait() == first.wait()
    assert (first.got[0].scheduled_ms, first.got[0].value) == (c.scheduled_ms, 7)
    stop_next(), stop_first()
    known, stop = store.watch("r", c.scheduled_ms, Told())  # kept: read later
    stop()
    assert known is not None and known.value == 7
    other, stop = store.watch("r", c.scheduled_ms + 10_000, Told())
    stop()
    assert other is None  # the next one has not run


def test_an_unknown_job_cannot_be_watched(store, clock):
    with pytest.raises(JobNotFoundError):
        store.watch("nope", None, Told())


def test_a_stopped_watch_is_not_told(store, clock):
    store.add(spec("s", After(0)))
    told = Told()
    _, stop = store.watch("s", None, told)
    stop()
    store.complete(claim_one(store), 1)
    assert not told.event.wait(0.3)


def test_the_handle_returns_the_value_or_raises_a_clear_error(store, clock):
    client = Client(store)
    h = client.enqueue("tests.noop", job_id="h")
    assert h == "h" and isinstance(h, str) and h.job_id == "h"
    with pytest.raises(ResultTimeoutError, match="did not end within 0.1s"):
        h.result(timeout=0.1)
    threading.Timer(0.1, lambda: store.complete(claim_one(store), [1, "x"])).start()
    assert h.result(timeout=5) == [1, "x"]
    assert client.handle("h").result(timeout=1) == [1, "x"]
    g = client.enqueue("tests.noop", job_id="g")
    store.fail(claim_one(store), "KeyError: 'customer'", retry_in=None)
    with pytest.raises(JobFailed) as err:
        g.result(timeout=5)
    e = err.value
    assert (e.job_id, e.state, e.error_type, e.message) == ("g", "failed", "KeyError", "'customer'")
    assert "job 'g'" in str(e) and "KeyError: 'customer'" in str(e)


def test_progress_is_token_checked_and_read_back(store, clock):
    store.add(spec("p", After(0)))
    c = claim_one(store)
    assert store.report_progress(c, '{"done":3}') is Commit.OK
    info = store.get("p")
    assert info.progress is not None
    assert (info.progress.scheduled_ms, info.progress.value) == (c.scheduled_ms, {"done": 3})
    assert Client(store).handle("p").progress() == {"done": 3}
    store.complete(c, None)
    assert store.report_progress(c, '{"done":4}') is not Commit.OK  # no longer its owner
    assert store.get("p").progress.value == {"done": 3}


@pytest.mark.parametrize(
    ("options", "state", "error"),
    [
        ({"retry": RetryPolicy(max_stalls=1)}, "failed", "lease lost"),
        ({"delivery": Delivery.AT_MOST_ONCE}, "abandoned", ""),
    ],
    ids=["dead-lettered", "abandoned"],
)
def test_an_invocation_whose_lease_expired_for_good_is_told(store, clock, options, state, error):
    store.add(spec("l", After(0), **options))
    told = Told()
    _, stop = store.watch("l", None, told)
    claim_one(store, lease=5.0)
    clock.advance(6)
    assert store.claim_due(ALL, 5.0, "owner-2").claims == []  # reaps it, for good
    got = told.wait()
    stop()
    assert (got.state, got.error) == (state, error)


@pytest.mark.redis
def test_closing_the_client_ends_a_waiting_handle(redis_url, redis_ns):
    from scheduler.errors import ClientClosedError

    client = Client(redis_url, namespace=redis_ns)
    h = client.enqueue("tests.noop", delay=3600)
    threading.Timer(0.3, client.close).start()
    with pytest.raises(ClientClosedError):
        h.result(timeout=10)


# ---- how long results are kept: a job's result_ttl (docs/results.md) -------------------


def test_a_recurring_job_with_a_result_ttl_keeps_every_runs_outcome(store, clock):
    store.add(every("r", 10, result_ttl=3600.0))
    clock.advance(10)
    c = claim_one(store)
    assert store.complete(c, {"run": 1}) is Commit.OK  # nobody waited
    known, stop = store.watch("r", c.scheduled_ms, Told())
    stop()
    assert known is not None and (known.state, known.value) == ("succeeded", {"run": 1})
    clock.advance(10)
    c2 = claim_one(store)
    store.fail(c2, "KeyError: 'x'", retry_in=None)
    known, stop = store.watch("r", c2.scheduled_ms, Told())
    stop()
    assert known is not None and (known.state, known.error) == ("failed", "KeyError: 'x'")


def test_a_late_handle_reads_a_kept_run_of_a_recurring_job(store, clock):
    client = Client(store)
    h = client.enqueue("tests.noop", every=10, result_ttl="1h", job_id="late")
    clock.advance(10)
    c = claim_one(store)
    store.complete(c, ["ran", 1])  # no handle waited
    assert h.at(c.scheduled).result(timeout=1) == ["ran", 1]
    assert client.handle("late", invocation=f"late@{c.scheduled_ms}").result(timeout=1) == [
        "ran",
        1,
    ]


def test_without_a_result_ttl_an_unwatched_recurring_run_is_not_kept(store, clock):
    store.add(every("r", 10))
    clock.advance(10)
    c = claim_one(store)
    store.complete(c, 1)
    known, stop = store.watch("r", c.scheduled_ms, Told())
    stop()
    assert known is None  # a later handle waits (docs/results.md: set a result_ttl)


def test_a_one_off_is_kept_for_its_result_ttl_in_process(clock):
    from scheduler.stores.memory import MemoryStore

    store = MemoryStore(clock)
    store.add(spec("a", After(0), result_ttl=60.0))
    store.add(spec("b", After(0)))
    for c in store.claim_due(ALL, 30.0, "owner-1").claims:
        store.complete(c, c.job_id)
    clock.advance(59)
    assert store.get("a") is not None and store.get("a").result_ttl == 60.0
    clock.advance(1)
    assert store.get("a") is None  # past its result_ttl: gone, as a shared store's key
    with pytest.raises(JobNotFoundError):
        store.watch("a", None, Told())
    assert store.get("b") is not None  # the default: a day
    clock.advance(86400)
    assert store.get("b") is None


@pytest.mark.parametrize("recurring", [False, True])
def test_a_shared_store_expires_results_after_the_result_ttl(
    redis_url, redis_ns, clock, redis_client, recurring
):
    from scheduler.stores.redis import RedisStore

    rs = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        job = every("k", 10, result_ttl=90.5) if recurring else spec("k", result_ttl=90.5)
        rs.add(job)
        clock.advance(10 if recurring else 0)
        c = claim_one(rs)
        rs.complete(c, "done")
        if recurring:
            key = rs.keys.result(f"k@{c.scheduled_ms}")
            assert 85_000 < redis_client.pttl(key) <= 90_500
            assert redis_client.pttl(rs.keys.job("k")) == -1  # live: no expiry
            rs.cancel("k")  # its end: retired, kept as long
        else:
            assert redis_client.pttl(rs.keys.job("k")) > 0
        assert 85_000 < redis_client.pttl(rs.keys.job("k")) <= 90_500
        assert rs.get("k").result_ttl == 90.5
    finally:
        rs.close()


@pytest.mark.parametrize("bad", [0, 0.5, 31 * 86400, "soon", float("nan"), True])
def test_a_result_ttl_out_of_range_is_refused_and_nothing_written(store, clock, bad):
    client = Client(store)
    with pytest.raises((ValueError, TypeError), match="result_ttl"):
        client.enqueue("tests.noop", delay=0, result_ttl=bad, job_id="x")
    assert store.get("x") is None


def test_a_handle_told_or_reading_a_stored_end_leaves_no_registration(
    redis_url, redis_ns, clock, redis_client
):
    """``waits`` holds only handles still waiting: a commit that tells one removes its
    member, and so does a handle that reads an end already stored; a recurring job's
    later runs nobody waits for are then not kept."""
    from scheduler.stores.redis import RedisStore

    rs = RedisStore(redis_url, redis_ns, clock=clock)
    client = Client(rs)
    try:
        h = client.enqueue("tests.noop", every=10, job_id="r")
        clock.advance(10)
        threading.Timer(0.1, lambda: rs.complete(claim_one(rs), 1)).start()
        assert h.result(timeout=5) == 1  # told: the next end
        assert redis_client.zcard(rs.keys.waits) == 0
        clock.advance(10)
        c = claim_one(rs)
        rs.complete(c, 2)  # nobody waits any more: not kept
        assert redis_client.exists(rs.keys.result(f"r@{c.scheduled_ms}")) == 0
        client.enqueue("tests.noop", job_id="o")
        rs.complete(claim_one(rs), 3)
        assert client.handle("o").result(timeout=1) == 3  # read: it ended before
        assert redis_client.zcard(rs.keys.waits) == 0
    finally:
        client.close()
        rs.close()


@pytest.mark.parametrize(
    ("invocation", "says"),
    [
        (1796432947654, "that looks like milliseconds"),
        (-5, "from 0 to 253402300799"),
        (1e300, "from 0 to 253402300799"),
        (float("nan"), "got nan"),
        (float("inf"), "got inf"),
        ("r@99999999999999999", "is not an invocation id of job 'r'"),
    ],
)
def test_a_handle_refuses_an_instant_that_is_none(store, clock, invocation, says):
    client = Client(store)
    h = client.enqueue("tests.noop", every=10, job_id="r")
    with pytest.raises(ValueError, match=says):
        h.at(invocation)
    with pytest.raises(ValueError, match=says):
        client.handle("r", invocation=invocation)


def test_a_failure_read_from_a_finished_one_off_names_the_job(store, clock):
    client = Client(store)
    client.enqueue("tests.noop", job_id="g")
    store.fail(claim_one(store), "KeyError: 'customer'", retry_in=None)
    with pytest.raises(JobFailed) as err:  # read from the record: no instant kept
        client.handle("g").result(timeout=1)
    assert str(err.value) == "job 'g' failed: KeyError: 'customer'"
    assert err.value.invocation == ""
