"""``RedisStore``'s checks (mixed in, as integrity/upkeep.py's methods are): the server and the
namespace's own keys before a replica runs on them (``check_server``), and the namespace's
epoch afterwards, on every claim (the data-loss alarm), with the namespace events they
record (``data_loss``, ``failover``, an operator's action).

Eviction: a replica also re-checks the server every ``REPLICA_CHECK_S`` seconds while it
runs (``watch_eviction``, from its claim path: ``INFO memory stats``, one round trip): a
``maxmemory-policy`` that may evict, or ``evicted_keys`` grown since the last check, raises
the data-loss alarm naming eviction; and every other data-loss alarm names eviction as its
cause when the server evicts or has evicted keys (``loss_cause``), not a failover.

The epoch is a random key each namespace holds from its first check: a claim's reply
carries it, and a changed or vanished epoch means Redis lost the namespace's data (a
restart without persistence, a failover to a replica that had not caught up).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from scheduler.stores.redis.integrity.replication import FAILOVER, event_fields
from scheduler.stores.redis.integrity.server_checks import (
    UNREACHABLE,
    check_info,
    check_keys,
    evicted_keys,
    evicting,
    policies,
    refused,
)
from scheduler.stores.redis.integrity.server_checks import unreachable as unreachable_error
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.sharding import shards

log = logging.getLogger("duetime.redis")

REPLICA_CHECK_S = 10.0  # seconds between a running replica's checks of eviction


class CheckMethods:
    """``RedisStore``'s server, key and epoch checks (mixed in; ``RedisStore.__init__``
    sets the attributes declared here)."""

    _r: Any  # redis.Redis with decode_responses=True
    _redis_mod: Any  # the redis module
    _checked: list[str] | None  # check_server()'s warnings, once checked
    _epoch: str | None  # the namespace's epoch, once known
    _epoch_owed = False  # an epoch Redis, out of memory, could not take yet
    url: str  # shown without its password
    keys: Keys
    namespace: str
    data_loss_alarms: int
    _evicted: int | None  # evicted_keys at the last check (None: not a replica)
    _policy: str  # maxmemory-policy at the last check
    _eviction_at: float  # monotonic time of the next check
    _eviction_cause: str | None  # the eviction seen, named by later data-loss alarms

    if TYPE_CHECKING:

        def _upkeep(self) -> None: ...  # upkeep.UpkeepMethods's reconciler pass

    def check_server(self) -> list[str]:
        """Check the server before running on it: Redis >= 7.0 and ``maxmemory-policy
        noeviction`` (else ``StoreConfigError`` with the fix); returns warnings (AOF off).
        Refuses a namespace whose own keys are of the wrong type (``StoreCorruptError``
        naming the key and what to do). Records the namespace's epoch (data-loss alarm)."""
        try:
            info = self._r.info()
        except UNREACHABLE as exc:  # a timeout too: a server that never answers
            raise unreachable_error(exc, self.url) from exc
        except self._redis_mod.ResponseError as exc:
            raise refused(exc, self.url) from exc
        warnings = check_info(info, self.url)
        if self._checked is not None:
            return self._checked
        self._evicted, self._policy = evicted_keys(info), policies(info)
        self._eviction_at = time.monotonic() + REPLICA_CHECK_S
        shards.check_count(self._r, self.keys, self.url)  # N is fixed per namespace
        self.check_keys()
        self.adopt_epoch()
        for w in warnings:
            log.warning(w)
        self._checked = warnings
        self._upkeep()  # a replica starts with a reconciler pass
        return warnings

    def check_keys(self) -> None:
        """Raise ``StoreCorruptError`` if a namespace-wide key (due sets, lease, running,
        events, stats, counters, ...) holds the wrong type: such a key cannot be moved
        aside like one job, and every script would refuse to run on it."""
        try:
            check_keys(self._r, self.keys, self.url)
        except UNREACHABLE as exc:
            raise unreachable_error(exc, self.url) from exc

    def adopt_epoch(self) -> None:
        """Create the namespace's epoch if it has none, and remember it: from now on a
        changed or vanished epoch raises the data-loss alarm."""
        self._epoch = self._new_epoch(quiet=False)

    def _new_epoch(self, *, quiet: bool = True) -> str | None:
        """The namespace's epoch, created if missing. Redis out of memory (``noeviction``)
        refuses even a SET NX of a key that exists, so the epoch is read first; a missing
        one that cannot be created now is None, and every claim tries again
        (``_epoch_owed``) until it exists: a replica starts and drains on a full Redis."""
        epoch: str | None = self._r.get(self.keys.epoch)
        if not epoch:
            try:
                self._r.set(self.keys.epoch, uuid.uuid4().hex, nx=True)
            except self._redis_mod.exceptions.OutOfMemoryError:
                if not quiet:
                    log.warning(
                        "Redis at %s is out of memory: namespace %r has no epoch yet (the "
                        "data-loss alarm is armed once it can be written)",
                        self.url,
                        self.namespace,
                    )
                self._epoch_owed = True
                return None
            epoch = self._r.get(self.keys.epoch)
        self._epoch_owed = False
        return epoch

    def watch_eviction(self, force: bool = False) -> None:
        """A running replica's check, at most every ``REPLICA_CHECK_S`` s (``force``: now):
        a change to an evicting ``maxmemory-policy``, or ``evicted_keys`` grown since the
        last check, raises the data-loss alarm naming eviction. Never raises (a claim must
        not fail for it); a store that never ran ``check_server`` (a producer) skips it."""
        now = time.monotonic()
        if self._evicted is None or (now < self._eviction_at and not force):
            return
        self._eviction_at = now + REPLICA_CHECK_S
        try:
            info = self._r.info("memory", "stats")
        except Exception as exc:  # noqa: BLE001 - the next period asks again
            log.warning("could not check Redis at %s for eviction (%s)", self.url, exc)
            return
        policy, count, base = policies(info), evicted_keys(info), self._evicted
        seen = []
        if evicting(info, self.url) is not None and policy != self._policy:
            seen.append(f"maxmemory-policy changed from {self._policy!r} to {policy!r}")
        if count > base:
            seen.append(f"Redis evicted {count - base} key(s) (evicted_keys {base} -> {count})")
        self._evicted, self._policy = count, policy  # lower: CONFIG RESETSTAT, a restart
        if seen:
            self._eviction_cause = f"eviction, maxmemory-policy {policy!r}"
            self._alarm_eviction("; ".join(seen) + " while this replica ran")

    def _alarm_eviction(self, what: str) -> None:
        detail = (
            f"eviction: {what}: under memory pressure Redis deletes keys, so jobs (lost "
            "runs), leases (duplicate runs) and the namespace's own keys may be gone. Set "
            "'maxmemory-policy noeviction', then run `duetime doctor` to count the jobs lost"
        )
        log.error("Redis at %s evicts keys (data loss): %s", self.url, detail)
        try:
            self.record_event("data_loss", detail)
        except Exception as exc:  # noqa: BLE001 - logged above; the claim goes on
            log.warning("could not record the eviction alarm in Redis (%s)", exc)

    def loss_cause(self) -> str:
        """What most likely lost acknowledged writes: eviction if this replica saw it, or
        the server evicts or has evicted keys (one ``INFO``); else a failover or a restart
        without fsync. Asked only when a loss is found (rare)."""
        self.watch_eviction(force=True)
        if self._eviction_cause:
            return self._eviction_cause
        try:
            info = self._r.info("memory", "stats")
        except Exception:  # noqa: BLE001 - the usual cause, then
            return FAILOVER
        return eviction_cause(info)

    def _watch_epoch(self, epoch: str) -> None:
        """Raise the alarm if the namespace's epoch changed or vanished (data loss)."""
        if self._epoch is None:
            self._epoch = epoch or (self._new_epoch() if self._epoch_owed else None)
            return
        if epoch == self._epoch:
            return
        cause = self.loss_cause()
        log.error(
            "Redis at %s lost duetime's data for namespace %r (epoch %s -> %s): "
            "jobs enqueued or claimed before may be gone; %s",
            self.url,
            self.namespace,
            self._epoch,
            epoch or "missing",
            "check persistence (AOF) and failovers"
            if cause == FAILOVER
            else f"cause: {cause} (set maxmemory-policy noeviction)",
        )
        detail = f"epoch {self._epoch} -> {epoch or 'missing'}"
        self.record_event("data_loss", detail if cause == FAILOVER else f"{detail}; cause: {cause}")
        self._epoch = self._new_epoch()

    def record_event(self, kind: str, detail: str, job: str = "") -> None:
        """Write a namespace event (``data_loss``, ``failover``; an operator's action, of
        ``job``: redo.note) and count it in stats."""
        if kind == "data_loss":
            self.data_loss_alarms += 1
        with self._r.pipeline(transaction=False) as p:
            p.xadd(
                self.keys.events, event_fields(kind, detail, job), maxlen=10_000, approximate=True
            )
            p.hincrby(self.keys.stats, kind, 1)
            p.execute()


def eviction_cause(info: Any) -> str:
    """A data-loss alarm's cause from the server's ``INFO memory stats``: eviction if it
    evicts or has evicted keys, else a failover or a restart without fsync."""
    count = evicted_keys(info)
    if evicting(info, "") is not None or count:
        return (
            f"eviction, maxmemory-policy {policies(info)!r}: {count} key(s) evicted since "
            "the server started"
        )
    return FAILOVER
