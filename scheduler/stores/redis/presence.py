"""A replica's presence in a namespace: its live key.

``replica:<owner>`` is written by every claim (``claim.lua``, TTL 3 leases): the live
replicas that ``duetime stats`` and ``duetime_replicas_alive`` count. A replica that
stops cleanly deletes it (``retire``), so it leaves the live set at once instead of ~3
leases later; one that dies leaves it to expire.

A plain ``DEL`` from Python (the replica's ACL user has it), not a script: nothing here
decides about jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.stores.redis.store import RedisStore


def retire(store: RedisStore, owner: str) -> None:
    """``owner`` stops: delete its live key."""
    with store.reachable():
        store.redis.delete(store.keys.replica(owner))
