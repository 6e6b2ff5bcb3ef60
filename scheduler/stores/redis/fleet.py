"""A namespace's fleet as the readouts see it: the live replicas, the tasks each serves,
and the jobs that wait because no live replica serves their task.

* ``replica:<owner>`` (a string with a TTL of 3 leases, written by every claim) marks a
  live replica (presence.py writes and deletes it).
* ``tasks`` (hash: replica -> the tasks it serves, as claim.lua's ARGV[6]: ``"*"`` or
  ``"\n<task>\n...\n"``) is written by each claim (lua/include/serve.lua).
* ``parked:<task>`` holds the due members of jobs no live replica serves, ``parked`` lists
  those tasks (lua/include/park.lua).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, TypedDict

from scheduler import timeinput
from scheduler.stores.redis import codec

if TYPE_CHECKING:
    from scheduler.stores.redis.sharded import ShardedStore
    from scheduler.stores.redis.store import RedisStore

    AnyStore: TypeAlias = RedisStore | ShardedStore  # explicit: store.py imports queries.py


class Replica(TypedDict):
    """A live replica: its id and the time of its last claim (epoch seconds)."""

    id: str
    last_claim: float | None
    last_claim_iso: str | None


def replicas(store: RedisStore) -> list[Replica]:
    """Live replicas (their ``replica:<id>`` keys expire 3 leases after the last claim)."""
    prefix = store.keys.replica("")
    keys = sorted(store.redis.scan_iter(match=prefix + "*", count=1000))
    values = store.redis.mget(keys) if keys else []
    out: list[Replica] = []
    for key, value in zip(keys, values, strict=True):
        if value is None:  # expired between SCAN and MGET
            continue
        at = int(value) / 1000 if codec.is_int(value) else None
        out.append(
            {
                "id": str(key)[len(prefix) :],
                "last_claim": at,
                "last_claim_iso": timeinput.iso_ms(at),
            }
        )
    return out


def waiting(store: RedisStore) -> dict[str, int]:
    """Invocations that wait for a replica serving their task, per task (lua/include/park.lua:
    the ``parked:<task>`` sets), without the empty ones."""
    tokens = sorted(str(t) for t in store.redis.smembers(store.keys.parked))
    with store.redis.pipeline(transaction=False) as p:
        for token in tokens:
            p.zcard(store.keys.parked_jobs(token))
        counts = p.execute()
    return {codec.token_name(t): int(n) for t, n in zip(tokens, counts, strict=True) if int(n)}


def waiting_all(store: AnyStore) -> dict[str, int]:
    """``waiting`` summed over the namespace's shards."""
    out: dict[str, int] = {}
    for part in store.parts:
        for task, n in waiting(part).items():
            out[task] = out.get(task, 0) + n
    return dict(sorted(out.items()))


def serves(store: RedisStore, alive: Collection[str]) -> dict[str, list[str] | None]:
    """The tasks each replica of ``alive`` serves, as its claims registered them (the
    ``tasks`` hash; None: every task). A replica missing there has not claimed yet."""
    raw: Mapping[str, str] = store.redis.hgetall(store.keys.tasks)
    return {o: codec.served_names(t) for o, t in sorted(raw.items()) if o in alive}


class Serving(NamedTuple):
    """Which tasks the live replicas serve (their claims registered them)."""

    by_replica: dict[str, list[str] | None]  # live replica -> its tasks (None: every task)
    unknown: tuple[str, ...] = ()  # live replicas whose tasks are not registered (yet)

    def lacks(self, task: str) -> bool:
        """True when replicas are alive but none serves ``task``: its jobs wait (they are
        not claimed, not failed) until one that has it claims. False while a live
        replica's tasks are unknown (it may serve it), and when no replica is alive at all
        (then nothing runs: ``stats`` and the no-live-replica alert say so)."""
        if self.unknown or not self.by_replica:
            return False
        return not any(t is None or task in t for t in self.by_replica.values())

    def why_waiting(self, task: str) -> str | None:
        """``"no live replica serves task 'x' (live replicas serve ...)"``, or None."""
        if not self.lacks(task):
            return None
        served = "; ".join(
            f"{o}: {'every task' if t is None else ', '.join(t) or 'no task'}"
            for o, t in self.by_replica.items()
        )
        return f"no live replica serves task {task!r} (live replicas serve {served})"


def serving(store: AnyStore) -> Serving:
    """What the namespace's live replicas serve (all shards)."""
    out: dict[str, list[str] | None] = {}
    alive: set[str] = set()
    for part in store.parts:
        ids = {r["id"] for r in replicas(part)}
        alive |= ids
        out.update(serves(part, ids))
    return Serving(dict(sorted(out.items())), tuple(sorted(alive - set(out))))
