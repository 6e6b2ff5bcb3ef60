"""Key rules, the same in both stores (docs/flow-control.md, "A job's limit key"): a job
added without a ``limit_key`` gets its task's rule's key, else its lane's, else none; its
own key wins. Bad input writes nothing, an ``enqueue_many`` batch included.

Each test drives a ``MemoryStore`` and a ``RedisStore`` (fakeredis, and a real
``redis-server``) on one fake clock through the same steps (``Client`` over each), and
asserts both the semantics and that the two stores agree. The shared store's own part (a
rule changed by another client: the stale stamp refused, the rules read again, the job
sent again with the right key) runs on the Redis store alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scheduler import flow, task
from scheduler.async_client import AsyncClient
from scheduler.client import Client
from scheduler.errors import KeyRuleError, KeyRulesChangedError
from scheduler.model import After, JobSpec, TaskRef
from scheduler.stores.base import Store
from scheduler.stores.redis import RedisStore
from tests.model.test_divergences import Pair, claim, claims

SEND = "billing.send"  # the task the rules below are for


def job(job_id: str, task: str = SEND, args: str = "{}", **kw: Any) -> JobSpec:
    return JobSpec(job_id=job_id, target=TaskRef(task, args), schedule=After(0), **kw)


def key_of(p: Pair, job_id: str) -> str | None:
    """The job's stored limit key, the same in both stores."""
    m, r = p.both(lambda s: s.get(job_id))
    assert m is not None and r is not None, (m, r)
    assert m.limit_key == r.limit_key
    return m.limit_key


def rule(p: Pair, template: str | None, **target: str) -> bool:
    m, r = p.both(lambda s: Client(s).set_key_rule(template, **target, new_task=True))
    assert m == r
    assert Client(p.mem).key_rules() == Client(p.red).key_rules()
    return bool(m)


def add(p: Pair, spec: JobSpec) -> str:
    m, r = p.both(lambda s: s.add(spec))
    assert m.outcome == r.outcome
    return m.outcome


def refused(p: Pair, op: Any) -> list[str]:
    """Run ``op`` on both stores: each raises ``KeyRuleError`` and writes nothing (no job,
    no event); the two messages, equal."""
    before = p.both(lambda s: (len(s.jobs()), len(s.events(1000))))
    errors = []
    for s in (p.mem, p.red):
        with pytest.raises(KeyRuleError) as info:
            op(s)
        errors.append(str(info.value))
    assert p.both(lambda s: (len(s.jobs()), len(s.events(1000)))) == before
    assert errors[0] == errors[1]
    return errors


# ---- which rule gives the key --------------------------------------------------------------


def test_a_task_rule_gives_its_jobs_their_key(pair: Pair) -> None:
    assert rule(pair, "customer:{customer_id}", task=SEND)
    add(pair, job("a", args='{"customer_id":42}'))
    add(pair, job("b", args='{"customer_id":"c7"}'))
    add(pair, job("other", task="billing.report", args='{"customer_id":1}'))
    assert [key_of(pair, j) for j in ("a", "b", "other")] == ["customer:42", "customer:c7", None]


def test_the_jobs_own_key_wins_then_the_task_rule_then_the_lane_rule(pair: Pair) -> None:
    rule(pair, "task:{n}", task=SEND)
    rule(pair, "lane:reports", lane="reports")
    add(pair, job("own", args='{"n":1}', lane="reports", limit_key="mine"))
    add(pair, job("task", args='{"n":1}', lane="reports"))
    add(pair, job("lane", task="billing.report", lane="reports"))
    add(pair, job("none", task="billing.report"))
    got = [key_of(pair, j) for j in ("own", "task", "lane", "none")]
    assert got == ["mine", "task:1", "lane:reports", None]
    # a job with its own key needs none of the rule's arguments
    add(pair, job("own2", limit_key="k"))
    assert key_of(pair, "own2") == "k"


def test_a_literal_rule_limits_a_task_as_a_whole(pair: Pair) -> None:
    """Per task: a literal template and a limit on that key."""
    rule(pair, "task:send", task=SEND)
    assert pair.both(lambda s: Client(s).set_limit("task:send", flow.limit(concurrency=1)))
    for i in range(3):
        add(pair, job(f"j{i}", args=f'{{"customer_id":{i}}}'))
    add(pair, job("free", task="billing.report"))
    pair.clock.advance(0.001)
    m, r = claim(pair)
    assert claims(m) == claims(r)
    assert sorted(c.job_id for c in m.claims) == ["free", "j0"]  # one of the task at once
    assert [c.spec.limit_key for c in m.claims if c.job_id == "j0"] == ["task:send"]


def test_braces_and_values_as_text(pair: Pair) -> None:
    rule(pair, "{{x}}-{a}-{b}", task=SEND)
    add(pair, job("j", args='{"a":"eu","b":-3,"c":[1]}'))
    assert key_of(pair, "j") == "{x}-eu--3"


# ---- bad input writes nothing --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ("{}", "has none"),
        ('{"customer_id":true}', "True (bool)"),
        ('{"customer_id":1.5}', "1.5 (float)"),
        ('{"customer_id":null}', "(NoneType)"),
        ('{"customer_id":[1]}', "(list)"),
        ('{"customer_id":{"a":1}}', "(dict)"),
        ('{"customer_id":"a\\nb"}', "printable"),
        ('{"customer_id":"' + "x" * 200 + '"}', "200"),
    ],
)
def test_a_job_its_rule_cannot_key_is_refused_and_nothing_written(
    pair: Pair, args: str, said: str
) -> None:
    rule(pair, "customer:{customer_id}", task=SEND)
    (error, _) = refused(pair, lambda s: s.add(job("j", args=args)))
    assert "'j'" in error and "task:billing.send" in error and "'customer_id'" in error
    assert said in error
    assert pair.both(lambda s: s.get("j")) == (None, None)


def test_enqueue_many_writes_nothing_of_a_batch_with_one_job_its_rule_refuses(
    pair: Pair,
) -> None:
    rule(pair, "lane-{x}", lane="default")
    batch = [{"task": "t.a", "kwargs": {"x": i}, "job_id": f"a{i}"} for i in range(60)]
    batch.insert(55, {"task": "t.a", "kwargs": {"y": 1}, "job_id": "bad"})  # in the 2nd call
    (error, _) = refused(pair, lambda s: Client(s).enqueue_many(batch))
    assert "'bad'" in error and "'x'" in error
    assert pair.both(lambda s: s.jobs()) == ([], [])


@pytest.mark.parametrize(
    ("template", "target"),
    [
        ("{a:>3}", {"task": SEND}),
        ("{a!r}", {"task": SEND}),
        ("{a.b}", {"task": SEND}),
        ("{a[0]}", {"task": SEND}),
        ("{}", {"task": SEND}),
        ("{0}", {"task": SEND}),
        ("x{", {"task": SEND}),
        ("x}", {"task": SEND}),
        ("tab\there", {"task": SEND}),
        ("c:{a}*", {"task": SEND}),
        ("all*", {"task": SEND}),
        ("", {"task": SEND}),
        ("x" * 201, {"task": SEND}),
        ("k", {}),
        ("k", {"task": SEND, "lane": "default"}),
        ("k", {"lane": "bad\nlane"}),
    ],
)
def test_a_bad_rule_is_refused_when_set_and_nothing_written(
    pair: Pair, template: str, target: dict[str, str]
) -> None:
    for s in (pair.mem, pair.red):
        with pytest.raises((ValueError, TypeError)):
            Client(s).set_key_rule(template, **target, new_task=True)
    assert pair.both(lambda s: Client(s).key_rules()) == ({}, {})


# ---- a change applies to the jobs added after it ----------------------------------------


def test_a_rule_changed_keys_the_jobs_added_after_it_and_removal(pair: Pair) -> None:
    rule(pair, "c:{n}", task=SEND)
    add(pair, job("kept", args='{"n":1}'))
    assert rule(pair, "d:{n}", task=SEND)
    assert not rule(pair, "d:{n}", task=SEND)  # unchanged
    add(pair, job("new", args='{"n":1}'))
    assert key_of(pair, "kept") == "c:1" and key_of(pair, "new") == "d:1"
    assert add(pair, job("new", args='{"n":1}')) == "unchanged"  # same rule, same key
    assert add(pair, job("kept", args='{"n":1}')) == "replaced"  # a changed definition
    assert key_of(pair, "kept") == "d:1"
    assert rule(pair, None, task=SEND)  # removed
    assert not rule(pair, None, task=SEND)
    add(pair, job("after", args='{"n":1}'))
    assert key_of(pair, "after") is None
    assert pair.both(lambda s: Client(s).key_rules()) == ({}, {})


def test_rules_are_listed_by_name(pair: Pair) -> None:
    rule(pair, "b", lane="reports")
    rule(pair, "a:{x}", task=SEND)
    assert Client(pair.red).key_rules() == {"lane:reports": "b", "task:billing.send": "a:{x}"}


# ---- the shared store: another client's change ------------------------------------------


def second(store: Store, clock: Any) -> RedisStore:
    """Another producer of ``store``'s namespace, on the same Redis (never closed here: it
    shares its connections with ``store``)."""
    assert isinstance(store, RedisStore)
    return RedisStore(store.redis, store.namespace, clock=clock)


def test_a_rule_set_by_another_client_is_applied_after_one_refused_call(pair: Pair) -> None:
    red = pair.red
    assert isinstance(red, RedisStore)
    red.add(job("before", args='{"n":1}'))  # its rules read as none, never changed
    stamp = red.rules.stamp
    other = second(red, pair.clock)
    assert other.set_key_rule("n:{n}", task=SEND)
    red.add(job("after", args='{"n":1}'))  # its stamp is stale: refused, reloaded, resent
    assert red.get("before").limit_key is None  # type: ignore[union-attr]
    assert red.get("after").limit_key == "n:1"  # type: ignore[union-attr]
    assert red.rules.stamp != stamp and red.rules.rules.rules == {"task:billing.send": "n:{n}"}
    # removed by the other: this one's cached rule would refuse a job without "n"; it reads
    # the rules again before it says so
    assert other.set_key_rule(None, task=SEND)
    red.add(job("bare"))
    assert red.get("bare").limit_key is None  # type: ignore[union-attr]


def test_enqueue_many_applies_a_rule_set_by_another_client(pair: Pair) -> None:
    red = pair.red
    assert isinstance(red, RedisStore)
    second(red, pair.clock).set_key_rule("lane-{x}", lane="default")
    ids = Client(red).enqueue_many(
        [{"task": "t.a", "kwargs": {"x": i}, "job_id": f"a{i}"} for i in range(120)]
    )
    assert [red.get(j).limit_key for j in ids] == [f"lane-{i}" for i in range(120)]  # type: ignore[union-attr]


def test_a_rule_changed_again_meanwhile_is_said_and_nothing_written(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reload reads rules that changed again before the resend: refused twice, the
    error says so, nothing written."""
    from scheduler.stores.redis import rulebook

    red = pair.red
    assert isinstance(red, RedisStore)
    other = second(red, pair.clock)
    other.set_key_rule("a:{n}", task=SEND)
    load = rulebook.load

    def racing(keys: Any, cache: Any) -> Any:
        yield from load(keys, cache)
        other.set_key_rule(f"{cache.stamp}:{{n}}", task=SEND)  # changed right after

    monkeypatch.setattr(rulebook, "load", racing)
    with pytest.raises(KeyRulesChangedError, match="add them again"):
        red.add(job("j", args='{"n":1}'))
    assert red.get("j") is None


@pytest.mark.redis
def test_the_async_client_applies_a_rule_set_by_another_client(
    redis_url: str, redis_ns: str
) -> None:
    async def main() -> list[Any]:
        async with AsyncClient(redis_url, namespace=redis_ns) as client:
            await client.enqueue(SEND, kwargs={"n": 1}, job_id="before")
            with Client(redis_url, namespace=redis_ns) as other:
                other.set_key_rule("n:{n}", task=SEND, new_task=True)
            await client.enqueue(SEND, kwargs={"n": 2}, job_id="one")
            await client.enqueue_many([{"task": SEND, "kwargs": {"n": 3}, "job_id": "many"}])
            assert await client.key_rules() == {"task:billing.send": "n:{n}"}
            assert not await client.set_key_rule("n:{n}", task=SEND, new_task=True)  # unchanged
            with pytest.raises(KeyRuleError, match="'bare'"):
                await client.enqueue(SEND, job_id="bare")  # no "n": nothing written
            return [(await client.get(j)).limit_key for j in ("before", "one", "many")]

    assert asyncio.run(main()) == [None, "n:2", "n:3"]
    with Client(redis_url, namespace=redis_ns) as c:
        assert sorted(j.job_id for j in c.jobs()) == ["before", "many", "one"]


@pytest.mark.redis
def test_a_sharded_namespace_refuses_rules(redis_url: str, redis_ns: str) -> None:
    """As it refuses limits: a key's jobs spread over the shards."""
    with Client(redis_url + "?shards=2", namespace=redis_ns) as client:
        with pytest.raises(TypeError, match="key rules need an unsharded namespace"):
            client.set_key_rule("k", task=SEND, new_task=True)
        with pytest.raises(ValueError, match="key template"):  # bad input said first
            client.set_key_rule("{a.b}", task=SEND, new_task=True)
        assert client.key_rules() == {}

    async def main() -> None:
        async with AsyncClient(redis_url + "?shards=2", namespace=redis_ns) as client:
            with pytest.raises(TypeError, match="key rules need an unsharded namespace"):
                await client.set_key_rule("k", lane="default")

    asyncio.run(main())


# ---- a rule for a task nothing serves: a likely typo -------------------------------------------


def test_a_rule_for_a_task_nothing_serves_is_refused_unless_new(store: Store) -> None:
    """A task no replica of the namespace has served (in process: not registered) is
    most likely misspelt: refused in one line, nothing written; ``new_task=True`` declares
    it for replicas yet to start; a lane's rule names no task."""
    client = Client(store)
    with pytest.raises(ValueError, match=r"no replica of this namespace serves task 'bilin\.send'"):
        client.set_key_rule("n:{n}", task="bilin.send")
    assert client.key_rules() == {}
    assert client.set_key_rule("n:{n}", task="bilin.send", new_task=True)
    assert client.set_key_rule("lane:x", lane="nowhere")
    assert client.set_key_rule(None, task="never.there") is False  # removal: no check


@task("billing.send.twin")
def _twin() -> None:
    """A task registered in this process (the in-process store's known tasks)."""


def test_a_task_a_replica_served_may_have_a_rule(store: Store) -> None:
    client = Client(store)
    if isinstance(store, RedisStore):  # what a replica's claim records (lua/include/serve.lua)
        store.redis.hset(store.keys.tasks, "replica-1", "\nbilling.send\n")
    name = "billing.send" if isinstance(store, RedisStore) else "billing.send.twin"
    assert client.set_key_rule("n:{n}", task=name)
    if isinstance(store, RedisStore):  # a replica that serves every task: any name may be
        store.redis.hset(store.keys.tasks, "replica-2", "*")
        assert client.set_key_rule("n:{n}", task="any.other")
