"""The one add path of a shared store, sync and async (``RedisStore.add``/``add_many``,
``AsyncClient.enqueue``/``enqueue_many``): the key rules applied, the jobs sent as few
add.lua calls (up to ADD_BATCH jobs per call, their 12 arguments each in a row,
lua/add.lua's ARGV[3..], then the rules' stamp), and the calls' replies read back as one
reply per job, as a lone add.lua call answers it.

Key rules (scheduler/keyrules.py, stores/redis/rulebook.py): each job without a limit key
gets its rule's, from the rules the store's ``RuleCache`` holds, and each call carries
their stamp. add.lua refuses a call whose stamp is not the namespace's (the rules changed
since they were read), before its first write: those jobs are sent again, once, after the
rules are read again. A job the cached rules refuse (a missing argument) is judged again
after a reload too, so a rule removed meanwhile does not refuse it. An add.lua call sent
without a stamp (an older client) is not checked.

A call of several jobs checks every job's arguments and the namespace's keys before its
first write, then decides and writes each job in turn (each atomic on its own, as when
they were one call each): a job whose old data blocks it gets its own error, the others
are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from scheduler.errors import KeyRuleError, KeyRulesChangedError
from scheduler.model import AddResult, JobSpec
from scheduler.stores.redis import ops, rulebook
from scheduler.stores.redis.integrity.server_checks import UNREACHABLE, refused, unreachable
from scheduler.stores.redis.protocol import definitions, records, script_args
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Adds, Op

ADD_BATCH = script_args.ADD_BATCH  # jobs per add.lua call (script_args.add_calls)


def per_job(n: int, replies: Sequence[Any]) -> list[Any]:
    """The ``replies`` of the calls that ``script_args.add_calls`` made for ``n`` jobs, as
    one item per job: ``[outcome, due_in_ms, seq_before, seq_after]`` (the call's counters), or the
    exception that refused it (a whole call's error stands for each of its jobs)."""
    out: list[Any] = []
    for i, reply in enumerate(replies):
        size = min(ADD_BATCH, n - i * ADD_BATCH)
        if isinstance(reply, Exception):
            out += [reply] * size
        elif size == 1:
            out.append(reply)
        else:
            before, after = reply[0], reply[1]
            out += [
                o if isinstance(o, Exception) else [o, d, before, after]
                for o, d in zip(reply[2::2], reply[3::2], strict=True)
            ]
    if len(out) != n:
        raise AssertionError(f"add.lua answered {len(out)} jobs of {n}")
    return out


def first_error(items: Sequence[Any]) -> Exception | None:
    """The first job's exception among ``per_job``'s items, if any."""
    return next((x for x in items if isinstance(x, Exception)), None)


def store_error(exc: Exception, url: str) -> Exception:
    """A job's error reply as the store's error (caused by it): out of memory,
    ``StoreFullError``; bad input, corrupt data or a stale stamp of the key rules, what
    ``refused`` makes of it."""
    out = unreachable(exc, url) if isinstance(exc, UNREACHABLE) else refused(exc, url)
    if out is not exc:
        out.__cause__ = exc
    return out


class Adding(Protocol):
    """What ``send`` needs of a ``RedisStore`` (its public surface, nothing more)."""

    url: str

    @property
    def replication(self) -> Any: ...  # a ReplicationWatch

    def call_script(self, name: str, *args: Any) -> Any: ...

    def call_scripts(self, *calls: tuple[str, Sequence[Any]], writes: int = 0) -> list[Any]: ...


def send(store: Adding, args: Sequence[list[Any]], stamp: str | None) -> list[Any]:
    """``RedisStore.send_adds``: add.lua for jobs whose arguments are ``args``, the calls in
    one round trip (``call_scripts``, then WAIT), each with ``stamp``; the lost-write check;
    one item per job: its reply, or the store's error for it (``store_error``), in place.
    One job (the common case) is one ``call_script``: its error other than a stale stamp
    is raised."""
    high = store.replication.seq_high
    if len(args) == 1:  # add_calls' one call, built directly
        try:
            reply = store.call_script("add", *args[0], *(() if stamp is None else (stamp,)))
        except KeyRulesChangedError as exc:
            return [exc]
        try:
            store.replication.after_add(high, [reply], [args[0][0]])
        except UNREACHABLE as exc:
            raise unreachable(exc, store.url) from exc
        return [reply]
    calls = script_args.add_calls(args, stamp)
    replies = store.call_scripts(*[("add", call) for call in calls], writes=len(args))
    items = per_job(len(args), replies)
    try:
        store.replication.after_add(
            high,
            [x for x in items if not isinstance(x, Exception)],
            [a[0] for a, x in zip(args, items, strict=True) if not isinstance(x, Exception)],
        )
    except UNREACHABLE as exc:
        raise unreachable(exc, store.url) from exc
    return [store_error(x, store.url) if isinstance(x, Exception) else x for x in items]


class OneAdding(Adding, Protocol):
    """What ``add_one`` needs of a sync ``RedisStore``."""

    payload_limit: int

    @property
    def rules(self) -> rulebook.RuleCache: ...

    def redis_now_ms(self) -> int: ...


def add_one(store: OneAdding, spec: JobSpec) -> AddResult | None:
    """``add`` of one job on a sync store, the steps in a row (an ``enqueue``'s path: the
    request machinery costs more than the rest of the producer's work). None when the
    cached key rules cannot judge the job (a rule that refuses it, or a stamp add.lua
    finds stale; nothing written): ``add`` then reads them again and judges it again."""
    cache = store.rules
    try:
        keyed = cache.rules.keyed(spec)
    except KeyRuleError:
        return None
    args = definitions.add_args(keyed, store.payload_limit, store.redis_now_ms)
    reply = send(store, (args,), cache.stamp)[0]
    return None if isinstance(reply, KeyRulesChangedError) else records.add_result(reply)


def add(
    keys: Keys, specs: Sequence[JobSpec], payload_limit: int, cache: rulebook.RuleCache
) -> Op[list[AddResult]]:
    """Store ``specs`` on the part of ``keys``, each add atomic on its own (the batch is
    not: the first refusal is raised, the other jobs were stored). Every job's key rule is
    applied and its arguments built before anything is sent: bad input raises, nothing of
    the batch written. Calls refused for a stale stamp are sent again once, after the
    rules are read again (``KeyRulesChangedError`` if they changed again meanwhile)."""
    items: list[Any] = [None] * len(specs)
    todo, fresh = list(range(len(specs))), False
    while todo:
        try:
            keyed = [cache.rules.keyed(specs[i]) for i in todo]
        except KeyRuleError:
            if fresh:
                raise
            yield from rulebook.load(keys, cache)  # the rule may be gone: judged again
            fresh = True
            continue
        args = []
        for spec in keyed:
            args.append((yield from ops.add_args(keys, spec, payload_limit)))
        got = yield Adds(keys.shard, tuple(args), cache.stamp)
        stale = []
        for i, x in zip(todo, got, strict=True):
            items[i] = x
            if isinstance(x, KeyRulesChangedError):
                stale.append(i)
        if stale and fresh:
            raise items[stale[0]]
        if stale:
            yield from rulebook.load(keys, cache)
            fresh = True
        todo = stale
    bad = first_error(items)
    if bad is not None:
        raise bad
    return [records.add_result(reply) for reply in items]
