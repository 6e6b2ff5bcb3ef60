"""What a Redis server must offer before duetime runs on it (``RedisStore.check_server``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.errors import DuetimeError

MIN_REDIS = (7, 0)


class StoreConfigError(DuetimeError, RuntimeError):
    """The Redis server is configured in a way that breaks duetime's guarantees."""


def check_info(info: Mapping[str, Any], url: str) -> list[str]:
    """Raise ``StoreConfigError`` (saying how to fix it) for a server older than 7.0 or
    one that may evict keys; return warnings for what weakens the contract (AOF off)."""
    version = tuple(int(x) for x in str(info.get("redis_version", "0")).split(".")[:2])
    if version < MIN_REDIS:
        raise StoreConfigError(
            f"Redis {info.get('redis_version')} at {url} is too old: duetime needs "
            f"{MIN_REDIS[0]}.{MIN_REDIS[1]} or newer (script shebangs, TIME in scripts)"
        )
    policy = info.get("maxmemory_policy", "noeviction")
    if policy != "noeviction":
        raise StoreConfigError(
            f"Redis at {url} has maxmemory-policy {policy!r}: under memory pressure it "
            "would evict leases (duplicate runs) or jobs (lost runs). Set 'maxmemory-policy "
            "noeviction' in redis.conf (or CONFIG SET maxmemory-policy noeviction)"
        )
    if not info.get("aof_enabled"):
        return [
            f"Redis at {url} has AOF off: a restart loses recent jobs and claims; set "
            "'appendonly yes' (and 'appendfsync always' for the strict contract)"
        ]
    return []
