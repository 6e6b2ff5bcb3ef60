"""A replica's presence in a namespace: its live key and the metrics leader.

* ``replica:<owner>`` is written by every claim (``claim.lua``, TTL 3 leases): the live
  replicas that ``duetime stats`` and ``duetime_replicas_alive`` count. A replica that
  stops cleanly deletes it (``retire``), so it leaves the live set at once instead of
  ~3 leases later; one that dies leaves it to expire.
* ``metrics-leader`` names the one replica whose ``/metrics`` exports the namespace-wide
  gauges (queue depth, running, live replicas, quarantined, event counters), so that a
  ``sum()`` over replicas does not count them N times. A replica takes it when it is
  scraped and the key is free (``SET NX``), keeps it by being scraped (each scrape
  extends it by ``METRICS_LEADER_TTL``) and gives it up when it stops cleanly; when the
  leader dies, the first replica scraped after the key expired takes over.

Plain commands from Python (``SET``, ``GET``, ``PEXPIRE``, ``DEL``: the replica's ACL
user has them), not a script: nothing here decides about jobs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from scheduler.stores.redis.protocol.keys import Keys


class RedisStore(Protocol):
    """What presence needs of a ``store.RedisStore`` (store.py imports this module)."""

    keys: Keys

    @property
    def redis(self) -> Any: ...

    def reachable(self) -> AbstractContextManager[None]: ...


METRICS_LEADER_TTL = 120.0  # seconds: longer than any sane scrape interval (1 m default)


def retire(store: RedisStore, owner: str) -> None:
    """``owner`` stops: delete its live key, and the metrics leadership if it holds it."""
    with store.reachable():
        r = store.redis
        r.delete(store.keys.replica(owner))
        r.hdel(store.keys.tasks, owner)  # it serves no task any more (claim.lua's registry)
        if store.keys.shard == 0 and _text(r.get(store.keys.metrics_leader)) == owner:
            r.delete(store.keys.metrics_leader)


def lead_metrics(store: RedisStore, owner: str, ttl: float = METRICS_LEADER_TTL) -> bool:
    """True if ``owner`` is (now) the metrics leader of the namespace (of ``store``,
    shard 0 of a sharded namespace); a leader's term is extended by ``ttl`` seconds.
    Redis out of memory refuses the SET of a new term (PEXPIRE still works): then every
    replica without a leader exports, shared rather than missing while it lasts."""
    from redis.exceptions import OutOfMemoryError

    ms = max(1, round(ttl * 1000))
    with store.reachable():
        r, key = store.redis, store.keys.metrics_leader
        try:
            if r.set(key, owner, nx=True, px=ms):
                return True
        except OutOfMemoryError:
            holder = _text(r.get(key))
            if holder == owner:
                r.pexpire(key, ms)
            return holder in (None, owner)
        if _text(r.get(key)) != owner:
            return False
        r.pexpire(key, ms)  # a term that just lapsed is at worst shared for one scrape
        return True


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
