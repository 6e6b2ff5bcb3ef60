"""An operator's redo and removal in a shared namespace: ``retry`` (retry.lua),
``retry_failed`` (every job with dead letters, through the ``dead-jobs`` index), ``delete``
(delete.lua) and the namespace's removal from every shard (``purge_namespace``)."""

from __future__ import annotations

from typing import Protocol

from scheduler.model import Retried
from scheduler.stores.redis.integrity import upkeep
from scheduler.stores.redis.ops import Layout
from scheduler.stores.redis.protocol import script_args
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Op, Script, run
from scheduler.stores.redis.reading import listing, queries
from scheduler.stores.redis.reading.readable import AnyStore, Part


class Noting(Part, Protocol):
    """A part that records a namespace event (``RedisStore.record_event``)."""

    def record_event(self, kind: str, detail: str, job: str = "") -> None: ...


class Redoable(AnyStore, Protocol):
    """A store whose parts record events: an operator's actions are noted on the job's."""

    def shard(self, job_id: str) -> Noting: ...


def retry(store: AnyStore, job_id: str) -> Retried:
    """Queue every dead-lettered invocation of ``job_id`` again, due now, at attempt 1."""
    return run(store, retry_op(store.shard(job_id).keys, job_id))


def retry_op(keys: Keys, job_id: str) -> Op[Retried]:
    """``retry`` as an operation (protocol/requests.py) on the part that holds the job."""
    reply = yield Script(keys.shard, "retry", script_args.job(job_id))
    if isinstance(reply, int):
        return Retried(job_id, reply)
    return Retried(job_id, 0, str(reply))


ENDED_FOR_GOOD = ("cancelled", "succeeded")  # retry.lua refuses these ("not_failed")


def retryable(store: AnyStore, task: str | None = None) -> list[str]:
    """Every job with dead letters (failed one-offs among them), optionally of ``task``."""
    return run(store, retryable_op(_layout(store), task))


def retryable_op(layout: Layout, task: str | None = None) -> Op[list[str]]:
    out: list[str] = []
    cursor: str | None = None
    while True:
        page = yield from listing.page(layout.parts, "dead", task=task, limit=500, cursor=cursor)
        # what retry.lua would take: not running, nor cancelled or succeeded since
        out += [i.job_id for i in page.jobs if not i.running and i.state not in ENDED_FOR_GOOD]
        cursor = page.cursor
        if cursor is None:
            return list(dict.fromkeys(out))


def retry_failed(store: AnyStore, task: str | None = None) -> list[Retried]:
    """``retry`` every job with dead letters (of ``task`` if given); one result each."""
    return run(store, retry_failed_op(_layout(store), task))


def retry_failed_op(layout: Layout, task: str | None = None) -> Op[list[Retried]]:
    out = []
    for job_id in (yield from retryable_op(layout, task)):
        out.append((yield from retry_op(layout.part(job_id), job_id)))
    return out


def delete(store: AnyStore, job_id: str) -> bool:
    """Remove ``job_id`` and what it owns (delete.lua). False if there was no such job."""
    return run(store, delete_op(store.shard(job_id).keys, job_id))


def delete_op(keys: Keys, job_id: str) -> Op[bool]:
    return int((yield Script(keys.shard, "delete", script_args.job(job_id)))) == 1


def _layout(store: AnyStore) -> Layout:
    return Layout([p.keys for p in store.parts])


def note(store: Redoable, job_id: str, action: str, who: str, outcome: str = "") -> None:
    """Record an operator's action on ``job_id`` as an ``operator`` event whose detail
    names who did it: ``retry by alice (session): queued 2 run(s)`` (the web console)."""
    detail = f"{action} by {who}" + (f": {outcome}" if outcome else "")
    store.shard(job_id).record_event("operator", detail, job_id)


def namespace_keys(store: AnyStore) -> int:
    """How many keys the namespace holds, every shard (a SCAN per shard)."""
    total = 0
    for part in queries.parts(store):
        for _ in part.redis.scan_iter(match=part.keys.prefix + "*", count=1000):
            total += 1
    return total


def purge_namespace(store: AnyStore) -> int:
    """Delete every key of the namespace, every shard; how many went."""
    return sum(upkeep.delete_namespace(part) for part in queries.parts(store))
