"""A namespace's fleet as the readouts see it: the live replicas, the tasks each serves,
and the jobs that wait because no live replica serves their task.

* ``replica:<owner>`` (a string with a TTL of 3 leases, written by every claim: the time
  of the claim, ms) marks a replica that claims (claiming/presence.py writes and deletes it);
  claim.lua takes one whose key exists as serving its tasks. Readouts are stricter: a
  replica is **alive** while its last claim is at most ``ALIVE_RESYNCS`` x its resync old
  (a dispatcher claims at least every 1.5 x resync, jittered, busy or idle); an older one
  (killed with SIGKILL, or stalled) is shown as "last seen N s ago", not counted alive,
  until its key expires.
* ``tasks`` (hash: replica -> the tasks it serves, as claim.lua's ARGV[6]: ``"*"`` or
  ``"\n<task>\n...\n"``) is written by each claim (lua/include/serve.lua).
* ``parked:<task>`` holds the due members of jobs no live replica serves, ``parked`` lists
  those tasks (lua/include/park.lua).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple, TypedDict

from scheduler import timeinput
from scheduler.stores.redis.protocol import records
from scheduler.stores.redis.reading.readable import AnyStore, Part

DEFAULT_RESYNC = 5.0  # seconds: Part's resync, for a replica that did not announce one
ALIVE_RESYNCS = 2.0  # alive: last claim at most this many resyncs ago (claims: <= 1.5 x)


class Replica(TypedDict):
    """A replica with a live key: its id, the time of its last claim (epoch seconds),
    whether it is alive (that claim is recent: ``alive_within``) and how long ago it was
    (seconds, Redis time; None if the key holds no time)."""

    id: str
    last_claim: float | None
    last_claim_iso: str | None
    alive: bool
    last_seen: float | None


def alive_within(resync: float | None) -> float:
    """Seconds since its last claim within which a replica with resync ``resync`` (None:
    not announced, ``DEFAULT_RESYNC``) is alive."""
    return ALIVE_RESYNCS * (resync or DEFAULT_RESYNC)


def is_alive(last_claim: float | None, now: float, resync: float | None) -> bool:
    """A replica whose key holds ``last_claim`` is alive at ``now`` (a key without a time
    it can be judged by is taken as alive, as claim.lua takes it)."""
    return last_claim is None or now - last_claim <= alive_within(resync)


def resyncs(store: AnyStore) -> dict[str, float]:
    """Each announced replica's resync (seconds), from its announcement
    (reading/console_history.py, on shard 0); a replica that did not announce one is
    missing."""
    part = store.parts[0]
    out: dict[str, float] = {}
    for name, raw in part.redis.hgetall(part.keys.replicas).items():
        try:
            value = json.loads(raw).get("resync")
        except (ValueError, TypeError, AttributeError):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            out[str(name)] = float(value)
    return out


def replicas(
    store: Part, now: float | None = None, resync: Mapping[str, float] | None = None
) -> list[Replica]:
    """Replicas with a live key (it expires 3 leases after the last claim), each judged
    alive or not at ``now`` (default: Redis ``TIME``) by its resync in ``resync`` (default:
    as announced)."""
    prefix = store.keys.replica("")
    keys = sorted(store.redis.scan_iter(match=prefix + "*", count=1000))
    values = store.redis.mget(keys) if keys else []
    if now is None:
        sec, usec = store.redis.time()
        now = int(sec) + int(usec) / 1e6
    if resync is None:
        resync = resyncs(store) if keys else {}
    out: list[Replica] = []
    for key, value in zip(keys, values, strict=True):
        if value is None:  # expired between SCAN and MGET
            continue
        rid = str(key)[len(prefix) :]
        at = int(value) / 1000 if records.is_int(value) else None
        out.append(
            {
                "id": rid,
                "last_claim": at,
                "last_claim_iso": timeinput.iso_ms(at),
                "alive": is_alive(at, now, resync.get(rid)),
                "last_seen": None if at is None else round(max(0.0, now - at), 3),
            }
        )
    return out


def merged(each: Iterable[Replica]) -> list[Replica]:
    """One record per replica from several shards' (its latest claim anywhere), by id."""
    seen: dict[str, Replica] = {}
    for r in each:
        old = seen.get(r["id"])
        if old is None or (r["last_claim"] or 0) > (old["last_claim"] or 0):
            seen[r["id"]] = r
    return sorted(seen.values(), key=lambda r: r["id"])


def replicas_all(store: AnyStore, now: float | None = None) -> list[Replica]:
    """``replicas`` of every shard, merged: what ``stats``, the console and
    ``duetime_replicas_alive`` count (its ``alive`` ones)."""
    shards = store.parts
    if now is None:
        sec, usec = shards[0].redis.time()
        now = int(sec) + int(usec) / 1e6
    announced = resyncs(store)
    return merged(r for part in shards for r in replicas(part, now, announced))


def waiting(store: Part) -> dict[str, int]:
    """Invocations that wait for a replica serving their task, per task (lua/include/park.lua:
    the ``parked:<task>`` sets), without the empty ones."""
    tokens = sorted(str(t) for t in store.redis.smembers(store.keys.parked))
    with store.redis.pipeline(transaction=False) as p:
        for token in tokens:
            p.zcard(store.keys.parked_jobs(token))
        counts = p.execute()
    return {records.token_name(t): int(n) for t, n in zip(tokens, counts, strict=True) if int(n)}


def waiting_all(store: AnyStore) -> dict[str, int]:
    """``waiting`` summed over the namespace's shards."""
    out: dict[str, int] = {}
    for part in store.parts:
        for task, n in waiting(part).items():
            out[task] = out.get(task, 0) + n
    return dict(sorted(out.items()))


def serves(store: Part, alive: Collection[str]) -> dict[str, list[str] | None]:
    """The tasks each replica of ``alive`` serves, as its claims registered them (the
    ``tasks`` hash; None: every task). A replica missing there has not claimed yet."""
    raw: Mapping[str, str] = store.redis.hgetall(store.keys.tasks)
    return {o: records.served_names(t) for o, t in sorted(raw.items()) if o in alive}


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
    alive = {r["id"] for r in replicas_all(store)}  # one TIME and one announcement read
    out: dict[str, list[str] | None] = {}
    for part in store.parts:
        out.update(serves(part, alive))
    return Serving(dict(sorted(out.items())), tuple(sorted(alive - set(out))))
