"""What the readouts need of a store: the narrow surface ``reading/`` (and the operator's
``redo.py``) reads through, so that no readout knows a store class. ``RedisStore`` and
``ShardedStore`` both are an ``AnyStore``; a ``RedisStore`` is also a ``Part``, its own
one part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from scheduler.stores.redis.protocol import requests
from scheduler.stores.redis.protocol.keys import Keys


class AnyStore(Protocol):
    """A namespace's store as the readouts see it: its parts (shards), which one holds a
    job, and its first part's keys and client."""

    keys: Keys
    namespace: str

    @property
    def redis(self) -> Any: ...

    @property
    def parts(self) -> Sequence[Part]: ...

    def shard(self, job_id: str) -> Part: ...


class Part(AnyStore, requests.Part, Protocol):
    """One Redis (one shard) of a namespace, which runs requests (``protocol/requests.py``)."""
