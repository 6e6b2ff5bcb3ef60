"""Issue 15: add.lua (several jobs per call), claim.lua and complete_many.lua record one
stream entry per call and event kind (docs/operating.md), and every reader expands it through one
parser (records.events): N jobs added, claimed and acked in batches are exactly N scheduled
(no attempt), N claimed and N succeeded events wherever events are read (Client.events,
AsyncClient.events, ``duetime events``, the inspection queries, the lag computation, the
fault recorder), and the counters agree."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest
from click.testing import CliRunner

import tests.helpers  # noqa: F401  (registers tests.noop)
from scheduler import AsyncClient, Client
from scheduler.cli import main
from scheduler.model import Commit
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.protocol import records
from scheduler.stores.redis.reading import queries
from scheduler.testing import FakeClock
from tests.faults.recorder import _events as recorder_events
from tests.helpers import spec

pytestmark = pytest.mark.redis

N = 250  # claims of 100 per call (MAX_BATCH), acks of 200 per call (MAX_ACKS)


@pytest.fixture
def burst(redis_url: str, redis_ns: str):
    """N one-off jobs added, claimed and acknowledged in batches; the store."""
    store = RedisStore(redis_url, redis_ns, clock=FakeClock(1000.0))
    store.add_many([spec(f"j{i:03}") for i in range(N)])
    claims = []
    while batch := store.claim_due({"default": 100}, 10.0, "o1").claims:
        claims += batch
    assert len(claims) == N
    assert set(store.complete_many([(c, None) for c in claims])) == {Commit.OK}
    yield store
    store.close()


def test_n_jobs_are_n_claimed_and_n_succeeded_events_everywhere(burst, redis_url, redis_ns):
    store = burst
    rows = store.redis.xrange(store.keys.events)
    batches = [f for _, f in rows if "batch" in f]
    assert len(batches) == len(rows) == 5 + 3 + 2  # 5 add calls, 3 claim calls, 2 ack calls
    want = {"scheduled": N, "claimed": N, "succeeded": N}
    assert queries.counters(store) == want

    def count(events) -> dict[str, int]:
        return dict(collections.Counter(e.kind for e in events))

    assert count(e for _, f in rows for e in records.events(f)) == want
    client = Client(redis_url, namespace=redis_ns)
    try:
        assert count(client.events(10_000)) == want
        for kind in ("scheduled", "claimed"):
            assert [e.job_id for e in client.events(10_000) if e.kind == kind] == [
                f"j{i:03}" for i in range(N)
            ]  # in add order, in claim order
        assert {e.attempt for e in client.events(10_000) if e.kind == "scheduled"} == {None}
        last = client.events(5)  # a limit counts events, not entries
        assert len(last) == 5 and last == client.events(10_000)[-5:]
    finally:
        client.close()

    async def async_events() -> list:
        async with AsyncClient(redis_url, namespace=redis_ns) as aclient:
            return await aclient.events(10_000)

    assert count(asyncio.run(async_events())) == want
    run = CliRunner().invoke(
        main, ["events", "--redis", redis_url, "--namespace", redis_ns, "-c", "10000", "--json"]
    )
    assert run.exit_code == 0, run.output
    kinds = collections.Counter(e["kind"] for e in json.loads(run.stdout))
    assert dict(kinds) == want
    run = CliRunner().invoke(
        main,
        ["events", "--redis", redis_url, "--namespace", redis_ns, "-c", "7", "--kind", "claimed"],
    )
    assert run.exit_code == 0 and len(run.stdout.splitlines()) == 7, run.output
    found = queries.recent_events(store, 10_000, kinds=frozenset({"succeeded"}))
    assert len(found) == N and len({e.id for e in found}) == 2  # two ack entries
    assert [e.event.kind for e in queries.recent_events(store, 10, "j249")] == [
        "scheduled",
        "claimed",
        "succeeded",
    ]
    followed = list(queries.follow(store, after="0-0", limit=3 * N, block=0.1, timeout=5))
    assert count(e.event for e in followed) == want
    assert queries.claim_lag(store)["samples"] == N
    assert count_dicts(f for _, f in rows) == want  # the fault tests' recorder


def count_dicts(entries) -> dict[str, int]:
    kinds = collections.Counter(e["kind"] for f in entries for e in recorder_events(f))
    return dict(kinds)


def test_a_lone_claim_or_ack_is_written_in_the_single_form(redis_url, redis_ns):
    store = RedisStore(redis_url, redis_ns, clock=FakeClock(1000.0))
    try:
        store.add(spec("one"))
        (claim,) = store.claim_due({"default": 10}, 10.0, "o1").claims
        assert store.complete_many([(claim, None)]) == [Commit.OK]
        rows = [f for _, f in store.redis.xrange(store.keys.events)]
        assert [f["kind"] for f in rows] == ["scheduled", "claimed", "succeeded"]
        assert all("batch" not in f and f["job"] == "one" for f in rows)
    finally:
        store.close()


def test_the_stream_keeps_about_ten_thousand_events_not_entries(redis_url, redis_ns):
    """A batch entry of n events trims the stream to ~10,000/n entries (at least 100): a
    stream of batch entries holds about as many events as one of single entries, so its
    memory stays bounded (without it, 10,000 entries of up to 1,000 events each)."""
    store = RedisStore(redis_url, redis_ns, clock=FakeClock(1000.0))
    try:
        for i in range(3000):
            store.add(spec(f"k{i:04}"))  # 3,000 single entries
        assert store.redis.xlen(store.keys.events) == 3000
        claims = []
        while batch := store.claim_due({"default": 100}, 10.0, "o1").claims:
            claims += batch
        store.complete_many([(c, None) for c in claims])
        rows = store.redis.xrange(store.keys.events)
        assert len(rows) <= 100 + 100  # the cap, plus the trimming's slack (one node)
        kept = [e for _, f in rows for e in records.events(f)]
        assert 5_000 <= len(kept) <= 20_000, len(kept)
        assert sum(e.kind == "succeeded" for e in kept) == 3000  # the newest are all there
    finally:
        store.close()


def test_a_batch_of_acks_lists_its_jobs_as_succeeded(burst, redis_url, redis_ns):
    """complete_many retires a one-off job in one HSET (its common case): the job is in
    done:succeeded as retire() would list it, so `duetime ls --state succeeded` shows it."""
    client = Client(redis_url, namespace=redis_ns)
    try:
        page = client.list_jobs("succeeded", limit=1000)
        assert sorted(j.job_id for j in page.jobs) == [f"j{i:03}" for i in range(N)]
        assert burst.redis.zcard(burst.keys.prefix + "done:succeeded") == N
    finally:
        client.close()
