"""Task-aware claiming (lua/include/serve.lua, park.lua), store by store on one real Redis
with exact (fake-clock) time: a replica never claims an invocation of a task it has not
registered; such a job costs no attempt and no lease, is left for a live replica that
serves its task, and waits (parked) while none does, until one claims."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.model import After, Every, JobSpec, TaskRef
from scheduler.stores.redis import RedisStore, redo
from scheduler.stores.redis.protocol import scripts as lua_scripts
from scheduler.stores.redis.reading import fleet, queries
from scheduler.testing import FakeClock

pytestmark = pytest.mark.redis

ALL = {"default": 10}
LEASE = 30.0


def job(job_id: str, task: str, schedule=None) -> JobSpec:
    return JobSpec(job_id, TaskRef(task), schedule or After(0))


@pytest.fixture
def replicas(redis_url: str, redis_ns: str, clock: FakeClock) -> Iterator[dict[str, RedisStore]]:
    """Three claimants of one namespace: 'a' serves t.a, 'b' serves t.b, 'ab' both."""
    out = {}
    for owner, names in {"a": ["t.a"], "b": ["t.b"], "ab": ["t.a", "t.b"]}.items():
        s = RedisStore(redis_url, redis_ns, clock=clock, lease=LEASE)
        s.serve(lambda names=names: (1, names))
        out[owner] = s
    yield out
    for s in out.values():
        s.close()


def claim(s: RedisStore, owner: str, caps: dict[str, int] | None = None):
    return s.claim_due(caps or ALL, LEASE, owner)


def parked(s: RedisStore) -> dict[str, list[str]]:
    r, k = s.redis, s.keys
    return {t: list(r.zrange(k.parked_jobs(t), 0, -1)) for t in sorted(r.smembers(k.parked))}


def test_a_claimant_takes_only_its_tasks_and_a_task_no_live_replica_serves_waits(replicas):
    a, b = replicas["a"], replicas["b"]
    a.add(job("j1", "t.a"))
    a.add(job("j2", "t.b"))
    batch = claim(a, "a")
    assert [c.job_id for c in batch.claims] == ["j1"]
    # no live replica serves t.b: its invocation waits, out of the due set, not failed
    assert {t: len(m) for t, m in parked(a).items()} == {"t.b": 1}
    assert a.redis.zcard(a.keys.due("default")) == 0
    info = a.get("j2")
    assert info is not None and info.attempts == 0 and info.failures == 0
    # the first claim of a replica that serves it takes it: attempt 1, due time kept
    (c,) = claim(b, "b").claims
    assert (c.job_id, c.attempt) == ("j2", 1)
    assert parked(b) == {}


def test_a_task_a_live_replica_serves_is_left_due_for_it_and_costs_no_early_wake(replicas, clock):
    a, b = replicas["a"], replicas["b"]
    assert claim(b, "b").claims == []  # b is alive (its claim wrote its live key) and serves t.b
    a.add(job("j2", "t.b"))
    a.add(job("later", "t.a", After(5)))
    batch = claim(a, "a")
    assert batch.claims == []
    assert parked(a) == {}  # left in the due set for b
    assert a.redis.zcard(a.keys.due("default")) == 2
    # a asks again when its own next job is due, not at once for b's (no hot loop)
    assert batch.next_due_in == pytest.approx(5.0, abs=0.01)
    assert [c.job_id for c in claim(b, "b").claims] == ["j2"]


def test_a_claimant_reaches_its_jobs_behind_a_wall_of_jobs_it_lacks(replicas):
    a, b = replicas["a"], replicas["b"]
    claim(b, "b")  # b alive
    for i in range(200):
        a.add(job(f"b{i:03d}", "t.b"))
    a.add(job("mine", "t.a"))
    got = []
    for _ in range(20):  # each call looks at a bounded number of members it passes over
        batch = claim(a, "a")
        got += [c.job_id for c in batch.claims]
        if got:
            break
        assert batch.next_due_in is not None and 0 < batch.next_due_in <= 1.0
        for _ in range(3):  # b takes its own meanwhile
            claim(b, "b", {"default": 100})
    assert got == ["mine"]


def test_when_the_replica_that_serves_a_task_stops_its_jobs_wait_then_run_on_the_next(
    replicas,
):
    a, b, ab = replicas["a"], replicas["b"], replicas["ab"]
    claim(b, "b")
    a.add(job("j2", "t.b"))
    assert claim(a, "a").claims == [] and parked(a) == {}
    b.retire("b")  # a clean stop: no longer alive, no longer serving
    assert claim(a, "a").claims == []
    assert list(parked(a)) == ["t.b"]
    assert a.redis.hkeys(a.keys.tasks) == ["a"]
    (c,) = claim(ab, "ab").claims
    assert (c.job_id, c.attempt) == ("j2", 1)


def test_a_recurring_job_waits_whole_and_keeps_its_grid(replicas, clock):
    a, b = replicas["a"], replicas["b"]
    a.add(job("tick", "t.b", Every(10)))
    clock.advance(10)
    assert claim(a, "a").claims == []
    assert list(parked(a)) == ["t.b"]
    clock.advance(25)  # b starts 25 s later: the misfire policy (skip) decides, as for any delay
    (c,) = claim(b, "b").claims
    assert c.job_id == "tick"
    info = b.get("tick")
    assert info is not None and info.next_run is not None
    anchor = c.scheduled
    assert (info.next_run - anchor) % 10 == pytest.approx(0, abs=1e-6)


def test_readouts_say_which_tasks_wait_and_who_serves_what(replicas):
    a, b = replicas["a"], replicas["b"]
    a.add(job("j2", "t.b"))
    a.add(job("j3", "t.b"))
    claim(a, "a")
    st = queries.stats(a)
    assert st["waiting"] == {"t.b": 2}
    assert st["serves"] == {"a": ["t.a"]}
    claim(b, "b")
    st = queries.stats(a)
    assert st["waiting"] == {}
    assert st["serves"] == {"a": ["t.a"], "b": ["t.b"]}


def test_a_claimant_that_serves_every_task_takes_everything(replicas, redis_url, redis_ns, clock):
    any_task = RedisStore(redis_url, redis_ns, clock=clock, lease=LEASE)
    try:
        any_task.add(job("x", "some.task"))
        assert [c.job_id for c in claim(any_task, "any").claims] == ["x"]
        assert any_task.redis.hget(any_task.keys.tasks, "any") == "*"
    finally:
        any_task.close()


def test_task_names_that_need_escaping_are_matched_exactly(replicas, redis_url, redis_ns, clock):
    odd = 'q"uote\\back é'
    s = RedisStore(redis_url, redis_ns, clock=clock, lease=LEASE)
    s.serve(lambda: (1, [odd]))
    try:
        s.add(job("o1", odd))
        s.add(job("o2", odd + "x"))
        assert [c.job_id for c in claim(s, "odd").claims] == ["o1"]
        assert list(parked(s)) == [queries_token(odd + "x")]
    finally:
        s.close()


def queries_token(name: str) -> str:
    from scheduler.stores.redis.protocol import records

    return records.task_token(name)


def park_one(a: RedisStore, job_id: str = "w") -> None:
    """Job ``job_id`` of task t.b waits: 'a' (t.a only) met it and no replica serves t.b."""
    a.add(job(job_id, "t.b"))
    assert claim(a, "a").claims == []
    assert parked(a) == {"t.b": [a.redis.zrange(a.keys.parked_jobs("t.b"), 0, -1)[0]]}


def test_cancel_of_a_waiting_job_prevents_its_start_and_it_waits_no_more(replicas):
    a, b = replicas["a"], replicas["b"]
    park_one(a)
    assert a.cancel("w") is True
    assert parked(a) in ({}, {"t.b": []})
    assert fleet.waiting(a) == {}
    assert claim(b, "b").claims == []


def test_pause_and_resume_of_a_waiting_job(replicas):
    a, b = replicas["a"], replicas["b"]
    park_one(a)
    assert a.pause("w") is True
    assert fleet.waiting(a) == {}
    assert claim(b, "b").claims == []  # paused: held
    assert a.resume("w") is True
    (c,) = claim(b, "b").claims
    assert (c.job_id, c.attempt) == ("w", 1)


def test_trigger_of_a_waiting_one_off_brings_it_forward_where_it_waits(replicas, clock):
    a, b = replicas["a"], replicas["b"]
    park_one(a)
    clock.advance(1)
    assert a.trigger("w") is True
    (c,) = claim(b, "b").claims
    assert c.job_id == "w"
    assert claim(b, "b").claims == []  # once


def test_delete_of_a_waiting_job_leaves_nothing_waiting(replicas):
    a = replicas["a"]
    park_one(a)
    assert redo.delete(a, "w") is True
    assert fleet.waiting(a) == {}


def test_the_reconciler_leaves_a_waiting_job_alone(replicas, clock):
    a, b = replicas["a"], replicas["b"]
    a.add(job("w", "t.b", Every(10)))
    clock.advance(10)
    assert claim(a, "a").claims == []
    assert [f for f in a.reconcile().findings if f.job_id == "w"] == []
    assert fleet.waiting(a) == {"t.b": 1}
    (c,) = claim(b, "b").claims
    assert (c.job_id, c.attempt) == ("w", 1)


def test_a_claimant_with_no_task_wakes_only_for_leases(redis_url, redis_ns, clock, replicas):
    bare = RedisStore(redis_url, redis_ns, clock=clock, lease=LEASE)
    bare.serve(lambda: (1, []))
    try:
        bare.add(job("soon", "t.a", After(5)))
        assert claim(replicas["a"], "a").claims == []  # 'a' is alive and serves t.a
        batch = claim(bare, "bare")
        assert batch.claims == [] and batch.next_due_in is None  # not at 5 s: it cannot run it
    finally:
        bare.close()


# serve.lua's task_of against its documented reading: the text after the first `"t":"` up
# to the next quote not escaped (preceded by an even number of backslashes), 1-1200 bytes
TASK_OF = lua_scripts.assemble(
    "#!lua\n--@include serve\n"
    "local out = {}\n"
    "for i = 3, #ARGV do out[#out + 1] = task_of(ARGV[i]) or false end\n"
    "return out\n",
    "task_of_probe.lua",
)


def task_of_model(d: bytes) -> bytes | None:
    s = d.find(b'"t":"')
    if s < 0:
        return None
    i = j = s + 5
    while (q := d.find(b'"', j)) >= 0:
        k = q - 1
        while k >= i and d[k] == 92:
            k -= 1
        if (q - 1 - k) % 2 == 0:
            tok = d[i:q]
            return tok if 0 < len(tok) <= 1200 else None
        j = q + 1
    return None


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    defs=st.lists(
        st.builds(
            lambda a, name, b: a + b'"t":"' + name + b'"' + b,
            st.sampled_from([b"{", b'{"a":"x\\"t\\":\\"y",', b'{"s":1,']),
            st.binary(max_size=12).filter(lambda n: b'"' not in n)
            | st.sampled_from(
                [b"", b"t.x", b"a\\", b"a\\\\", b"a\\\\\\", b'a\\"b', b"x" * 1201, b"x" * 1200]
            ),
            st.sampled_from([b"}", b'", "u":"v"}', b'\\""}', b""]),
        )
        | st.binary(max_size=30),
        min_size=1,
        max_size=30,
    )
)
def test_task_of_reads_the_task_as_documented(redis_client, defs):
    got = redis_client.eval(TASK_OF, 0, "duetime:{task-of}:", "", *defs)
    assert [g if g else None for g in got] == [task_of_model(d) for d in defs]
