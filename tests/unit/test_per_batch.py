"""The replica's hot path, second pass (issue 15): what is remembered per definition or per
callable, and what is reported per batch instead of per job, must say the same as before.

* a task's call is built once per distinct (name, arguments) while the registry is
  unchanged, and arguments that hold a list or an object are parsed afresh for each call;
* whether a callable is a coroutine function is remembered per live object, without
  keeping it alive;
* successes reach the metrics once per flush of batched acks, every one of them;
* the summary's and the per-minute figures' batch hooks count what the per-item ones did.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from scheduler import tasks
from scheduler.metrics import Metrics, Run
from scheduler.model import Commit, TaskRef
from scheduler.recorder import Recorder
from scheduler.signals import Signals
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.claiming.acked_claims import commits as _commits
from scheduler.stores.redis.reading import console_history
from tests.fakeredis_fixtures import fakeredis_client
from workers import calls, coroutines


@tasks.task("tests.per_batch.echo")
def echo(**kwargs: object) -> dict[str, object]:
    return kwargs


def test_a_call_is_built_once_per_definition_of_scalar_arguments():
    ref = TaskRef("tests.per_batch.echo", '{"n": 1, "s": "x", "f": 0.5, "b": true, "z": null}')
    first = tasks.resolve(ref)
    assert tasks.resolve(TaskRef(ref.name, ref.args_json)) is first  # an equal ref: the same
    assert first() == {"n": 1, "s": "x", "f": 0.5, "b": True, "z": None}
    assert tasks.resolve(TaskRef(ref.name, '{"n": 2}'))() == {"n": 2}


def test_arguments_that_can_be_mutated_are_parsed_for_each_call():
    ref = TaskRef("tests.per_batch.echo", '{"items": [1], "opts": {"a": 1}}')
    got = tasks.resolve(ref)()
    got["items"].append(2)  # type: ignore[attr-defined]
    got["opts"]["b"] = 2  # type: ignore[index]
    assert tasks.resolve(ref)() == {"items": [1], "opts": {"a": 1}}  # the next call: untouched


def test_registering_a_task_again_makes_its_remembered_call_stale():
    def version(v: int):  # the same qualname each time, as after a module reload
        def reloaded() -> int:
            return v

        return reloaded

    tasks.task("tests.per_batch.reloaded")(version(1))
    ref = TaskRef("tests.per_batch.reloaded")
    assert tasks.resolve(ref)() == 1
    tasks.task("tests.per_batch.reloaded")(version(2))
    assert tasks.resolve(ref)() == 2


def test_arguments_that_do_not_parse_still_raise():
    with pytest.raises(ValueError):
        tasks.resolve(TaskRef("tests.per_batch.echo", "{nope"))
    with pytest.raises(TypeError):
        tasks.resolve(TaskRef("tests.per_batch.echo", "[1]"))


def test_the_coroutine_flag_is_remembered_per_live_callable(monkeypatch):
    asked: list[object] = []
    real = coroutines.is_async
    monkeypatch.setattr(coroutines, "is_async", lambda fn: asked.append(fn) or real(fn))
    flags = calls.AsyncFlags()

    async def job_async() -> None:
        pass

    def job() -> None:
        pass

    assert [flags(job_async), flags(job), flags(job_async), flags(job)] == [True, False] * 2
    assert asked == [job_async, job]  # each asked once


def test_the_flag_cache_keeps_no_callable_alive():
    flags = calls.AsyncFlags()

    def make():
        big = bytearray(10)

        def job() -> int:
            return len(big)

        return job

    job = make()
    ref = weakref.ref(job)
    assert flags(job) is False
    del job
    gc.collect()
    assert ref() is None  # the cache held it only weakly
    again = make()
    assert flags(again) is False  # a new object (maybe at the same id) is asked afresh


def test_a_callable_that_cannot_be_weakly_referenced_is_asked_each_time():
    class Slotted:
        __slots__ = ()

        async def __call__(self) -> None:
            pass

    flags = calls.AsyncFlags(limit=2)
    assert flags(Slotted()) is True and flags(Slotted()) is True


def test_the_flag_cache_is_bounded():
    flags = calls.AsyncFlags(limit=3)
    fns = [lambda: None for _ in range(10)]
    assert not any(flags(f) for f in fns)
    assert len(flags._flags) <= 3


class Successes(Metrics):
    """Records each batch of successes as it arrives."""

    def __init__(self) -> None:
        self.batches: list[list[Run]] = []

    def succeeded_many(self, runs):
        self.batches.append(list(runs))


def test_every_success_reaches_the_metrics_in_batches(make_engine, clock):
    metrics = Successes()
    eng = make_engine(2, metrics=metrics)
    for _ in range(30):
        eng.after(lambda: None, 1)
    clock.advance(1)
    assert eng.wait_idle()
    runs = [run for batch in metrics.batches for run in batch]
    assert len(runs) == 30 and len(metrics.batches) < 30
    assert all(r.lane == "default" and r.task == "callable" for r in runs)


def test_a_success_the_store_refused_is_not_counted_as_one(make_engine, clock):
    """Found by a stranger's Redis stall: a success whose commit was refused (its lease was
    lost meanwhile: "stale commit rejected") was counted as succeeded, and again when the
    invocation ran a second time (6 successes for 3 jobs)."""
    from scheduler.model import Commit
    from scheduler.stores.memory import MemoryStore

    class Refusing(MemoryStore):
        def complete_many(self, done):
            answers = super().complete_many(done)
            return [
                Commit.LEASE_LOST if claim.job_id.startswith("stale") else answer
                for (claim, _), answer in zip(done, answers, strict=True)
            ]

    metrics = Successes()
    eng = make_engine(2, metrics=metrics, store=Refusing(clock))
    for n in range(6):
        eng.after(lambda: None, 1, job_id=f"stale-{n}" if n % 2 else f"fine-{n}")
    clock.advance(1)
    assert eng.wait_idle()
    runs = [run for batch in metrics.batches for run in batch]
    assert len(runs) == 3, runs


def test_the_default_batch_hook_calls_the_per_job_hooks():
    seen: list[tuple] = []

    class PerJob(Metrics):
        def finished(self, lane, outcome):
            seen.append(("finished", lane, outcome))

        def ran(self, lane, task, outcome, seconds, waited):
            seen.append(("ran", lane, task, outcome, seconds, waited))

        def claimed(self, lane, lag):
            seen.append(("claimed", lane, lag))

    m = PerJob()
    m.succeeded_many([Run("a", "t", 0.5, 0.25)])
    m.claimed_many([("a", 1.0), ("b", 2.0)])
    assert seen == [
        ("finished", "a", "succeeded"),
        ("ran", "a", "t", "succeeded", 0.5, 0.25),
        ("claimed", "a", 1.0),
        ("claimed", "b", 2.0),
    ]


def test_the_summary_counts_batches_as_it_counted_items(clock):
    inner: list[tuple] = []

    class Inner(Metrics):
        def claimed(self, lane, lag):
            inner.append(("claimed", lane, lag))

        def finished(self, lane, outcome):
            inner.append(("finished", lane, outcome))

    signals = Signals(Inner(), clock=clock)
    signals.claimed_many([("default", 0.001), ("default", 0.002), ("other", 0.1)])
    signals.succeeded_many([Run("default", "t", 0.01, 0.003), Run("default", "t", 0.01, 0.001)])
    s = signals.take()
    assert (s["claims"], s["succeeded"], s["lag_p99_ms"], s["wait_p99_ms"]) == (3, 2, 100.0, 3.0)
    assert inner == [
        ("claimed", "default", 0.001),
        ("claimed", "default", 0.002),
        ("claimed", "other", 0.1),
        ("finished", "default", "succeeded"),
        ("finished", "default", "succeeded"),
    ]


@pytest.mark.fakeredis
def test_the_minute_figures_count_batches_as_they_counted_items():
    store = RedisStore(fakeredis_client(), "per-batch")
    rec = Recorder(Metrics(), store, "r1", wall=lambda: 600 * 60 + 5)
    rec.claimed_many([("default", 0.001), ("default", 0.002), ("default", 0.100)])
    rec.succeeded_many([Run("default", "t", 0.01, 0.0)] * 2)
    rec.finished("default", "failed")
    rec.flush()
    (got,) = console_history.minutes(store, 600, 600)
    assert (got["claims"], got["succeeded"], got["failed"]) == (3, 2, 1)
    assert (got["lag_p50"], got["lag_p99"]) == (2.0, 100.0)


def test_reply_codes_map_to_outcomes_and_an_unknown_one_raises():
    assert _commits(["ok", "lease_lost", "not_found", "quarantined"]) == list(Commit)
    with pytest.raises(ValueError):
        _commits(["ok", "bogus"])
