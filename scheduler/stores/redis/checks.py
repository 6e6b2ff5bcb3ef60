"""``RedisStore``'s checks (mixed in, as upkeep.py's methods are): the server and the
namespace's own keys before a replica runs on them (``check_server``), and the namespace's
epoch afterwards, on every claim (the data-loss alarm), with the namespace events they
record (``data_loss``, ``failover``, an operator's action).

The epoch is a random key each namespace holds from its first check: a claim's reply
carries it, and a changed or vanished epoch means Redis lost the namespace's data (a
restart without persistence, a failover to a replica that had not caught up).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from scheduler.stores.redis import shards
from scheduler.stores.redis.keys import Keys
from scheduler.stores.redis.replication import event_fields
from scheduler.stores.redis.server_checks import UNREACHABLE, check_info, check_keys, refused
from scheduler.stores.redis.server_checks import unreachable as unreachable_error

log = logging.getLogger("duetime.redis")


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

    def _watch_epoch(self, epoch: str) -> None:
        """Raise the alarm if the namespace's epoch changed or vanished (data loss)."""
        if self._epoch is None:
            self._epoch = epoch or (self._new_epoch() if self._epoch_owed else None)
            return
        if epoch == self._epoch:
            return
        log.error(
            "Redis at %s lost duetime's data for namespace %r (epoch %s -> %s): "
            "jobs enqueued or claimed before may be gone; check persistence (AOF) "
            "and failovers",
            self.url,
            self.namespace,
            self._epoch,
            epoch or "missing",
        )
        self._record("data_loss", f"epoch {self._epoch} -> {epoch or 'missing'}")
        self._epoch = self._new_epoch()

    def _record(self, kind: str, detail: str, job: str = "") -> None:
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
