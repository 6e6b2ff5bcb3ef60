"""Many adds in few add.lua calls (``enqueue_many``): up to ADD_BATCH jobs per call, their
12 arguments each in a row (lua/add.lua, ARGV[3..]), and the calls' replies read back as
one reply per job, as a lone add.lua call answers it.

A call of several jobs checks every job's arguments and the namespace's keys before its
first write, then decides and writes each job in turn (each atomic on its own, as when
they were one call each): a job whose old data blocks it gets its own error, the others
are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from scheduler.model import AddResult
from scheduler.stores.redis.integrity.server_checks import UNREACHABLE, refused, unreachable
from scheduler.stores.redis.protocol import records, script_args

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
    """A job's error reply as the store's error: out of memory, ``StoreFullError``; bad
    input or corrupt data, what ``refused`` makes of it."""
    return unreachable(exc, url) if isinstance(exc, UNREACHABLE) else refused(exc, url)


class Adding(Protocol):
    """What ``add_many`` needs of a ``RedisStore`` (its public surface, nothing more)."""

    url: str

    @property
    def replication(self) -> Any: ...  # a ReplicationWatch

    def call_scripts(self, *calls: tuple[str, Sequence[Any]], writes: int = 0) -> list[Any]: ...

    def reachable(self) -> AbstractContextManager[None]: ...


def add_many(store: Adding, args: Sequence[list[Any]]) -> list[AddResult]:
    """``RedisStore.add_many`` for jobs whose add.lua arguments are ``args``: the calls
    in one round trip (``call_scripts``, then WAIT), the lost-write check, then the first
    refusal raised as the store's error (the other jobs were stored)."""
    if not args:
        return []
    high = store.replication.seq_high
    replies = store.call_scripts(
        *[("add", call) for call in script_args.add_calls(args)], writes=len(args)
    )
    items = per_job(len(args), replies)
    with store.reachable():
        store.replication.after_add(
            high,
            [x for x in items if not isinstance(x, Exception)],
            [a[0] for a, x in zip(args, items, strict=True) if not isinstance(x, Exception)],
        )
    bad = first_error(items)
    if bad is not None:
        raise store_error(bad, store.url) from bad
    return [records.add_result(reply) for reply in items]
