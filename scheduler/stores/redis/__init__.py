"""The shared store: jobs live in Redis, replicas anywhere claim them under leases.

The only part of duetime that knows the key layout (keys.py) and the formats of the
entries stored under it (codec.py). Rooms of this wing:

* store.py - ``RedisStore``: one namespace on one Redis (or Sentinel primary), each
  method one Lua script call (scripts.py loads ``lua/*.lua``);
* sharded.py - ``ShardedStore`` and ``open_store``: a namespace split over N shards
  (shards.py), e.g. on a Redis Cluster;
* calendar_plans.py - the replica's half of cron series (plans written by plan.lua);
* wakeups.py - the pub/sub subscriber that pokes dispatchers;
* replication.py, server_checks.py, urls.py - WAIT and failover, server settings,
  every URL form;
* queries.py - read-side queries for the CLI and operators (``duetime ls``, ``show``...).
"""

from scheduler.errors import (  # the store's errors, importable from here too
    ShardCountError,
    StoreConfigError,
    StoreCorruptError,
    StoreFullError,
    StoreUnavailableError,
)
from scheduler.stores.redis.sharded import ShardedStore, open_store
from scheduler.stores.redis.store import RedisStore

__all__ = [
    "RedisStore",
    "ShardCountError",
    "ShardedStore",
    "StoreConfigError",
    "StoreCorruptError",
    "StoreFullError",
    "StoreUnavailableError",
    "open_store",
]
