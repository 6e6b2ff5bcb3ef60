"""The shared store: jobs live in Redis, replicas anywhere claim them under leases.

The only part of duetime that knows the key layout (protocol/keys.py) and the formats of the
entries stored under it (protocol/definitions.py, protocol/records.py). Its rooms:

* store.py, async_store.py - ``RedisStore`` (one namespace on one Redis, or a Sentinel
  primary; each method one Lua script call) and ``AsyncStore`` (the producer's and
  inspector's side on ``redis.asyncio``); ops.py, adds.py, redo.py - the operations both run;
* protocol/ - how duetime speaks to Redis: key names, URLs, the Lua scripts, the one
  gateway that calls them and the one module that packs their arguments, the formats;
* claiming/ - a replica's side: claim.lua's reply, acks riding with claims, calendar
  plans, wake-ups, presence;
* reading/ - the readouts (``duetime ls``, ``show``, ``stats``, the console's history);
* integrity/ - server checks, data loss and failover, WAIT, the reconciler and quarantine;
* sharding/ - ``ShardedStore`` and ``open_store``: a namespace split over N shards.
"""

from scheduler.errors import (  # the store's errors, importable from here too
    LayoutRefusedError,
    ShardCountError,
    StoreConfigError,
    StoreCorruptError,
    StoreFullError,
    StoreUnavailableError,
)
from scheduler.stores.redis.sharding.sharded import ShardedStore, open_store
from scheduler.stores.redis.store import RedisStore

__all__ = [
    "LayoutRefusedError",
    "RedisStore",
    "ShardCountError",
    "ShardedStore",
    "StoreConfigError",
    "StoreCorruptError",
    "StoreFullError",
    "StoreUnavailableError",
    "open_store",
]
