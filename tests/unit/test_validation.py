"""Every bad input gets a clear error, and nothing is written."""

from __future__ import annotations

import functools
import math

import pytest

from scheduler import JobScheduler, PayloadError, RetryPolicy, task
from scheduler.client import Client
from scheduler.model import Misfire


def nothing_written(facade) -> bool:
    return facade.engine.jobs() == [] and facade.engine.events() == []


@pytest.mark.parametrize("delay", [math.nan, math.inf, -math.inf, -1, -1e-9])
def test_bad_delays_are_value_errors(once, delay):
    with pytest.raises(ValueError, match="delay_seconds"):
        once.schedule(lambda: None, delay)
    assert nothing_written(once)


@pytest.mark.parametrize("delay", ["soon", "1x", "-5s", "P1M", "nan"])
def test_strings_that_are_not_durations_are_value_errors(once, delay):
    with pytest.raises(ValueError, match="delay_seconds"):
        once.schedule(lambda: None, delay)
    assert nothing_written(once)


@pytest.mark.parametrize("delay", [None, b"1", [1], True, 1j])
def test_non_number_delays_are_type_errors(once, delay):
    with pytest.raises(TypeError, match="delay_seconds must be a number"):
        once.schedule(lambda: None, delay)
    assert nothing_written(once)


def test_delay_zero_and_ints_are_valid(once):
    assert once.schedule(lambda: None, 0) >= 1
    assert once.schedule(lambda: None, 3) >= 1


@pytest.mark.parametrize("interval", [0, -1, math.nan, math.inf, 0.0])
def test_bad_intervals_are_value_errors(recurring, interval):
    with pytest.raises(ValueError, match="interval_seconds"):
        recurring.schedule("x", lambda: None, interval)
    assert nothing_written(recurring)


@pytest.mark.parametrize("interval", ["0s", "PT0S", "every minute"])
def test_strings_that_are_not_intervals_are_value_errors(recurring, interval):
    with pytest.raises(ValueError, match="interval_seconds"):
        recurring.schedule("x", lambda: None, interval)
    assert nothing_written(recurring)


@pytest.mark.parametrize("interval", [None, False, b"1"])
def test_non_number_intervals_are_type_errors(recurring, interval):
    with pytest.raises(TypeError):
        recurring.schedule("x", lambda: None, interval)
    assert nothing_written(recurring)


@pytest.mark.parametrize("job", [None, 42, "print", object()])
def test_non_callable_jobs_are_type_errors(once, recurring, job):
    with pytest.raises(TypeError, match="callable"):
        once.schedule(job, 1)
    with pytest.raises(TypeError, match="callable"):
        recurring.schedule("x", job, 1)
    assert nothing_written(once) and nothing_written(recurring)


@pytest.mark.parametrize(
    "job_id",
    ["", "x" * 201, "bad\nid", "tab\tid", " padded", "nul\0", ".", "..", 42, None, b"bytes"],
)
def test_bad_job_ids_are_value_errors(recurring, job_id):
    with pytest.raises(ValueError, match="job id"):
        recurring.schedule(job_id, lambda: None, 1)
    assert nothing_written(recurring)


def test_long_unicode_ids_up_to_200_chars_are_fine(recurring):
    recurring.schedule("é" * 200, lambda: None, 1)
    recurring.schedule("billing:invoice/42 {x}", lambda: None, 1)
    assert len(recurring.engine.jobs()) == 2


def test_task_kwargs_must_be_json_and_bounded(make_engine):
    from scheduler import task

    @task("tests.validation.echo")
    def echo(**kw):
        return kw

    eng = make_engine()
    with pytest.raises(PayloadError, match="JSON-serialisable"):
        eng.after("tests.validation.echo", 1, kwargs={"x": object()})
    with pytest.raises(PayloadError, match="JSON-serialisable"):
        eng.after("tests.validation.echo", 1, kwargs={"x": math.nan})
    with pytest.raises(PayloadError, match="round trip"):
        eng.after("tests.validation.echo", 1, kwargs={"x": (1, 2)})
    with pytest.raises(PayloadError, match="over the 65536-byte limit"):
        eng.after("tests.validation.echo", 1, kwargs={"x": "a" * 70_000})
    deep: dict[str, object] = {}
    for _ in range(100_000):  # was a bare RecursionError from inside json
        deep = {"a": deep}
    with pytest.raises(PayloadError, match="nested too deeply"):
        eng.after("tests.validation.echo", 1, kwargs={"x": deep})
    assert eng.jobs() == []


@pytest.mark.parametrize("bad", [[1, 2], "x=1", 7, [("x", 1)], {1: "a"}])
def test_kwargs_that_are_not_a_mapping_of_names_say_what_is_accepted(make_engine, bad):
    """Issue 12: a list, a string or a number used to fail with "cannot convert
    dictionary update sequence element #0 to a sequence"."""
    from scheduler import task

    @task("tests.validation.kw")
    def kw(**kw):
        return kw

    eng = make_engine()
    with pytest.raises(TypeError, match=r"^kwargs (must be a mapping of argument names|keys)"):
        eng.after("tests.validation.kw", 1, kwargs=bad)
    client = Client(eng.store)
    with pytest.raises(TypeError, match=r"^kwargs (must be a mapping|keys must be)"):
        client.enqueue("some.task", kwargs=bad)
    assert eng.jobs() == []


def test_unknown_task_name_is_refused_at_schedule_time(make_engine):
    eng = make_engine()
    with pytest.raises(LookupError, match="no task named 'nope'.*@scheduler.task"):
        eng.after("nope", 1)


@pytest.mark.parametrize(
    "kw",
    [
        dict(max_attempts=0),
        dict(max_attempts=1.5),
        dict(backoff=-1),
        dict(jitter=2),
        dict(factor=math.inf),
    ],
)
def test_bad_retry_policies(kw):
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**kw)


def test_bad_options_write_nothing(make_engine):
    eng = make_engine()
    with pytest.raises(ValueError):
        eng.every(lambda: None, 1, misfire="sometimes")
    with pytest.raises(ValueError):
        eng.every(lambda: None, 1, overlap="maybe")
    with pytest.raises(ValueError, match="timeout"):
        eng.after(lambda: None, 1, timeout=0)
    with pytest.raises(ValueError, match="timezone-aware"):
        import datetime as dt

        eng.at(lambda: None, dt.datetime(2030, 1, 1))
    assert eng.every(lambda: None, 1, misfire=Misfire.CATCH_UP)
    assert len(eng.jobs()) == 1


@pytest.mark.parametrize("n", [0, -1, 1.5, "2", None, True])
def test_bad_worker_counts(n):
    with pytest.raises((TypeError, ValueError), match="num_workers"):
        JobScheduler(num_workers=n)


@pytest.mark.parametrize(
    "call",
    [
        lambda e: e.after(lambda: None, 1e12),
        lambda e: e.after(lambda: None, "40000000d"),
        lambda e: e.every(lambda: None, 1e12),
        lambda e: e.at(lambda: None, 1e17),
        lambda e: e.every(lambda: None, 60, anchor=3e11),
        lambda e: e.after(lambda: None, 1, timeout=1e12),
    ],
)
def test_times_past_the_year_9999_are_refused(make_engine, call):
    """A job due after the year 9999 made every listing of its namespace fail ("year 33715
    is out of range"): delays and intervals are at most 1e11 s, instants before 10000."""
    eng = make_engine()
    with pytest.raises(ValueError, match="at most 1e11 s|before the year 10000"):
        call(eng)
    assert eng.jobs() == []
    eng.after(lambda: None, 9e10)  # ~2,850 years: still accepted
    eng.at(lambda: None, 253402300799)


def test_a_worker_count_past_the_thread_cap_is_refused_at_once_and_starts_nothing():
    """num_workers=10**6 started threads until the process ran out (minutes), leaving the
    started ones behind. Now a ValueError before any thread starts; a lane refused after
    others stops those again."""
    import threading

    from scheduler import Scheduler
    from workers.pool import MAX_WORKERS

    before = set(threading.enumerate())
    with pytest.raises(ValueError, match="more than the 4096 threads"):
        JobScheduler(num_workers=10**6)
    with pytest.raises(ValueError, match="lane 'big'"):
        Scheduler(num_workers=8, lanes={"big": MAX_WORKERS + 1})
    started = [t for t in threading.enumerate() if t not in before]
    for t in started:  # the refused engine's first lane: its 8 workers end on close
        t.join(timeout=5)
    assert not [t.name for t in started if t.is_alive()]


BARE_CALLS: list[int] = []


def bare_task_target(x: int) -> int:
    BARE_CALLS.append(x)
    return x * 2


def test_a_bare_task_decorator_registers_the_function_itself(make_engine):
    """``@task`` without parentheses returned the decorator in place of the function: the
    module's function was replaced, nothing was registered, and replicas said "no task
    named ... is registered" although the user had decorated it."""
    from scheduler import task, tasks

    decorated = task(bare_task_target)
    assert decorated is bare_task_target and decorated(2) == 4
    name = f"{__name__}.bare_task_target"
    assert tasks.lookup(name) is bare_task_target
    eng = make_engine()
    eng.after(name, 0, kwargs={"x": 5})
    assert eng.wait_idle(5) and BARE_CALLS == [2, 5]  # the direct call, then the job
    with pytest.raises(TypeError, match="task name must be a string"):
        task(5)  # type: ignore[call-overload]


def test_a_mistyped_option_is_named_with_the_nearest_one(make_engine, clock):
    """Python's own error named an internal function: "make_spec() got an unexpected
    keyword argument 'dealy'"."""
    from scheduler.stores.memory import MemoryStore

    eng = make_engine()
    with pytest.raises(TypeError, match=r"unknown option 'lnae' \(did you mean 'lane'\?\)"):
        eng.after(lambda: None, 1, lnae="x")
    client = Client(MemoryStore(clock))
    with pytest.raises(TypeError, match=r"enqueue\(\) got an unknown option 'dealy' \(did you"):
        client.enqueue("t.x", dealy=1)
    with pytest.raises(TypeError, match=r"unknown option 'zzz'; its options are kwargs, lane"):
        client.enqueue("t.x", delay=1, zzz=1)
    assert eng.jobs() == [] and client.jobs() == []


def test_enqueue_many_says_which_item_is_wrong_and_writes_nothing(clock):
    from scheduler.stores.memory import MemoryStore

    client = Client(MemoryStore(clock))
    good = {"task": "t.x", "delay": 1}
    with pytest.raises(ValueError, match=r"^enqueue_many item 2: delay must be >= 0"):
        client.enqueue_many([good, good, {"task": "t.x", "delay": -1}])
    with pytest.raises(TypeError, match=r"^enqueue_many item 1: no 'task'"):
        client.enqueue_many([good, {"delay": 1}])
    with pytest.raises(TypeError, match=r"^enqueue_many item 0: each item is a mapping"):
        client.enqueue_many(["t.x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^enqueue_many item 1: enqueue\(\) got an unknown"):
        client.enqueue_many([good, {"task": "t.x", "dealy": 1}])
    assert client.jobs() == []


@pytest.mark.parametrize("given", [None, 123, object()])
def test_a_client_of_something_else_than_a_url_or_store_is_refused(given):
    """``Client(None)`` was accepted as a store and failed at its first call."""
    with pytest.raises(TypeError, match=r"Client\(\) takes a Redis URL \(str\)"):
        Client(given)  # type: ignore[arg-type]


def test_kwargs_for_an_unregistered_callable_says_to_register_it():
    """A Client (shared store) cannot run a plain callable: the error names the function
    and @task first, and partial only for in-process use."""
    from scheduler import MemoryStore

    async def unregistered(x: int) -> int:
        return x

    c = Client(MemoryStore())
    with pytest.raises(TypeError, match=r"unregistered is not one: register it with @task"):
        c.enqueue(unregistered, kwargs={"x": 1}, delay=60)
    assert c.jobs() == []


@task("tests.validation.greet")
def _greet(name: str, *, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


@task("tests.validation.anything")
def _anything(first: int, **rest: object) -> int:
    return first


@pytest.mark.parametrize(
    "target", [_greet, "tests.validation.greet"], ids=["the function", "its name"]
)
@pytest.mark.parametrize(
    "kwargs, why",
    [
        ({"nme": "x"}, r"missing a required argument: 'name'; did you mean 'name' for 'nme'\?"),
        ({}, "missing a required argument: 'name'"),
        ({"name": "x", "punctuaton": "?"}, "did you mean 'punctuation' for 'punctuaton'"),
    ],
)
def test_arguments_that_the_task_would_refuse_are_refused_at_enqueue(target, kwargs, why):
    """A misspelt or missing argument used to be stored, claimed and run, and to fail on a
    replica ("hello() got an unexpected keyword argument"); the producer has the
    function, so it is checked there, and nothing is written."""
    from scheduler import MemoryStore

    c = Client(MemoryStore())
    with pytest.raises(TypeError, match=r"do not fit task 'tests.validation.greet' \(name: "):
        c.enqueue(target, kwargs=kwargs, delay=60)
    with pytest.raises(TypeError, match=why):
        c.enqueue_many([{"task": target, "kwargs": kwargs, "delay": 60}])
    assert c.jobs() == []
    assert c.enqueue(target, kwargs={"name": "x"}, delay=60)  # what fits is stored


def test_arguments_are_checked_only_where_the_task_is_known():
    from scheduler import MemoryStore

    c = Client(MemoryStore())
    # **rest takes any name; a task this process never registered is the replicas' to run
    assert c.enqueue(_anything, kwargs={"first": 1, "whatever": 2}, delay=60)
    with pytest.raises(TypeError, match="missing a required argument: 'first'"):
        c.enqueue("tests.validation.anything", kwargs={"whatever": 2}, delay=60)
    assert c.enqueue("elsewhere.unknown", kwargs={"anything": 1}, delay=60)


def nested(depth: int, leaf: object = 1) -> object:
    """``{"a": {"a": ... leaf}}``: objects nested ``depth`` levels deep."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("wrap", [dict, list], ids=["objects", "lists"])
def test_arguments_nest_at_most_max_depth_levels_whatever_the_python(wrap):
    """Python's JSON gives up at ~1,000 levels before 3.13 and at ~10,000 on 3.13: a 3.13
    producer stored arguments that a replica on 3.10-3.12 could not parse. The limit is
    now duetime's own, the same on every Python."""
    from scheduler.validation import MAX_DEPTH, json_args

    def deep(levels: int) -> dict[str, object]:  # the kwargs dict is the first level
        value: object = 1
        for _ in range(levels - 1):
            value = {"a": value} if wrap is dict else [value]
        return {"x": value}

    assert json_args(deep(MAX_DEPTH)).count("1") == 1
    for levels in (MAX_DEPTH + 1, 1500, 5000):  # accepted by 3.13's json, not by 3.11's
        with pytest.raises(PayloadError, match=f"more than {MAX_DEPTH} levels"):
            json_args(deep(levels))


def test_brackets_inside_strings_do_not_count_as_depth():
    from scheduler.validation import MAX_DEPTH, json_args

    flat_text = {"x": "[{" * (MAX_DEPTH * 4), "y": [["ok"]]}
    assert json_args(flat_text).startswith('{"x":"[{[{')


@pytest.mark.parametrize("depth", [1500, 50_000])
def test_json_nested_deeper_than_python_parses_is_malformed_not_a_recursion_error(depth):
    """What a reader meets in Redis (stored by a newer Python, or by hand): ValueError,
    as any text that does not parse, so it is moved aside instead of escaping."""
    from scheduler.validation import loads

    text = '{"a":' * depth + "1" + "}" * depth
    try:
        assert loads(text) == nested(depth)  # this Python parses it (3.13, 1,500 levels)
    except ValueError as exc:
        assert "nested too deeply" in str(exc)


def test_a_callable_that_requires_arguments_is_refused_when_scheduled(make_engine):
    """A job is called with no arguments: ``schedule(needs_x, 1)`` was accepted and failed
    at its time ("missing 1 required positional argument"), in every facade."""

    def needs(x: int, *, y: int, z: int = 1) -> None:
        pass

    class Callable:
        def __call__(self, a: int) -> None:
            pass

    eng = make_engine()
    for fn in (needs, Callable()):
        with pytest.raises(TypeError, match=r"requires (x, y|a), but a job is called with no"):
            eng.after(fn, 1)
    with JobScheduler(1) as s:
        with pytest.raises(TypeError, match="functools.partial"):
            s.schedule(needs, 1)
        assert s.schedule(functools.partial(needs, 1, y=2), 60) is not None  # bound: fine
    assert eng.jobs() == []


@pytest.mark.parametrize("options", [{"retry": 2}, {"timeout": 30, "lane": "slow"}])
def test_task_options_on_the_decorator_say_where_options_go(options):
    """``@task(retry=2)`` (Celery's and Dramatiq's form) said "task() got an unexpected
    keyword argument 'retry'"; it now says options are given when a job is scheduled."""
    with pytest.raises(
        TypeError, match=r"^@task takes only a name, not 'retry'|^@task .*'timeout'"
    ):
        task(**options)
    with pytest.raises(TypeError, match=r"given when it is scheduled, e\.g\. enqueue\(fn, retry="):
        task("tests.validation.optioned", **options)


@pytest.mark.parametrize("ns", [".", ".."])
def test_dot_namespaces_are_refused(ns):
    """The console's URLs carry the namespace as a path segment: a browser resolves "." and
    ".." away (and "%2E%2E" too), so such a namespace could not be reached."""
    from scheduler.stores.redis.protocol.keys import namespace

    with pytest.raises(ValueError, match="read it as a folder"):
        namespace(ns)
    assert namespace("a..b") == "a..b" and namespace(".hidden") == ".hidden"


def _nested_list(depth: int) -> list[object]:
    deep: list[object] = []
    for _ in range(depth - 1):
        deep = [deep]
    return deep


@task("tests.validation.takes_a")
def takes_a(a: object = None) -> None:
    pass


@pytest.mark.parametrize("depth", [300, 1_200, 100_000])
@pytest.mark.parametrize("entry", ["client", "engine"])
def test_arguments_nested_past_the_limit_get_the_documented_error_at_any_depth(
    make_engine, entry, depth
):
    """Issue 31: ``kwargs=<a list nested 1,200 deep>`` raised RecursionError while its
    TypeError's message was built (a plain repr of the list); 257 deep got the TypeError.
    Now every depth gets it (the value shown cut to a few levels), and a mapping whose
    value nests past MAX_DEPTH gets the PayloadError, in Client and the engine alike."""
    from scheduler.stores.memory import MemoryStore

    add = (
        Client(MemoryStore()).enqueue
        if entry == "client"
        else functools.partial(make_engine().after, delay=1)
    )
    deep = _nested_list(depth)
    with pytest.raises(TypeError, match=r"kwargs must be a mapping .*; got list \[\[\[\["):
        add("tests.validation.takes_a", kwargs=deep)
    with pytest.raises(TypeError, match=r"kwargs keys must be argument names \(str\)"):
        add("tests.validation.takes_a", kwargs={_nested_tuple(depth): 1})
    with pytest.raises(PayloadError, match="more than 256 levels"):
        add("tests.validation.takes_a", kwargs={"a": deep})


def _nested_tuple(depth: int) -> tuple[object, ...]:
    deep: tuple[object, ...] = ()
    for _ in range(depth - 1):
        deep = (deep,)
    return deep
