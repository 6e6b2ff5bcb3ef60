"""What a RedisStore does about Redis replication and failover.

Redis replicates asynchronously: a write acknowledged by the primary can be missing on the
replica that a failover promotes. duetime cannot prevent that (Redis promises nothing
stronger: docs/failover.md); it offers two things:

- **WAIT after writes** (``wait_replicas=N``): each write script is followed, on the same
  connection and in the same round trip, by ``WAIT N timeout_ms``, so the call returns only
  once N replicas have the write or the timeout passed. A timeout is counted
  (``unreplicated_writes``) and logged, not raised: the write *did* happen on the primary.
  WAIT narrows the loss window to writes that timed out; it is not a transaction (Redis:
  "best effort").
- **Detection, never silence.** ``ReplicationWatch`` notices (a) a new primary (a Sentinel
  client's pool saw another primary address), recorded as a ``failover`` event, and (b) a
  fence counter lower than a fence this store was already handed: claims acknowledged
  before were lost; recorded as a ``data_loss`` event, and the counter is raised back so
  later claims get fences above every one handed out to this store; likewise (c) a seq
  counter lower than one an add of this store returned: enqueues were lost. Counters are
  watermarks: another writer that advances one first hides the gap. So (d) a producer on a
  Sentinel URL also keeps an inventory of the adds acknowledged in its last ``RECENT_S``
  seconds (``RecentAdds``) and, when its pool moves to a new primary, looks each job up
  there: one missing is an enqueue the old primary acknowledged alone (a split brain),
  reported by id.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from scheduler.stores.redis.protocol import gateway, urls

log = logging.getLogger("duetime.redis")

WARN_EVERY = 10.0  # seconds between two "WAIT timed out" warnings
REFRESH = 1.0  # seconds between two "who is the primary?" questions to the sentinels
# Raise the fence counter to at least ARGV[1] (one key: fine on a cluster); the old value.
RAISE_FENCE = """
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return c
"""
RAISE = gateway.Lua(RAISE_FENCE)

RECENT_S = 30.0  # seconds of acknowledged adds a Sentinel producer checks after a failover
RECENT_MAX = 20_000  # at most this many (~2 MB of job ids)

Record = Callable[[str, str], None]


def seq_seen(replies: Sequence[Sequence[Any]]) -> tuple[int, int] | None:
    """The lowest ``seq_before`` and the highest ``seq_after`` of add.lua replies
    ``[outcome, due_in, seq_before, seq_after]``; None if none carries them (older
    scripts). A ``seq_before`` below the highest seq this client was already given means
    the server lost acknowledged adds."""
    before = after = -1  # one pass: a batch of adds replies once per job
    for r in replies:
        if len(r) >= 4:
            b, a = int(r[2]), int(r[3])
            before = b if before < 0 or b < before else before
            after = a if a > after else after
    return None if after < 0 else (before, after)


def lost_writes_detail(before: int, high: int, old: int) -> str:
    """The ``data_loss`` event's detail for a seq counter found at ``before`` < ``high``."""
    return (
        f"seq counter was {before}, below {high} already acknowledged to this "
        f"client: at least {high - before} acknowledged enqueue(s) or reschedule(s) lost "
        f"(jobs enqueued just before may be gone: enqueue them again with the "
        f"same job_id, an upsert); counter raised from {old}"
    )


FAILOVER = "a failover or a restart without fsync"  # the cause named unless eviction is seen


def log_data_loss(url: str, detail: str, cause: str = FAILOVER) -> None:
    """The ERROR line of a ``data_loss`` alarm (the sync store's and AsyncClient's);
    ``cause``: what lost the writes, as far as the store can tell (checks.loss_cause)."""
    log.error("Redis at %s lacks writes it acknowledged (%s): %s", url, cause, detail)


def event_fields(kind: str, detail: str, job: str = "") -> dict[str, str]:
    """A namespace event's stream fields (``data_loss``, ``failover``, an operator's)."""
    at = str(int(time.time() * 1000))
    return {"kind": kind, "job": job, "sched": "", "attempt": "", "detail": detail, "at": at}


# (event kind, detail): writes the event and counts it


class Waiter:
    """A store's ``WAIT`` after writes: what follows a round trip of scripts (``wait``;
    protocol/gateway.py sends both on one connection: WAIT counts the writes of *its own*
    connection), and the judgement of its answer (``check``)."""

    def __init__(self, client: Any, replicas: int, timeout_ms: int) -> None:
        if replicas < 0:
            raise ValueError(f"wait_replicas must be >= 0, not {replicas}")
        if replicas and timeout_ms < 1:
            raise ValueError("wait_timeout_ms must be >= 1 (WAIT with 0 blocks forever)")
        if replicas and urls.is_cluster_client(client):
            raise ValueError("wait_replicas is not supported on Redis Cluster yet: pass 0")
        self._r = client
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.unreplicated_writes = 0
        self._lock = threading.Lock()
        self._warned = 0.0

    def wait(self, writes: int = 1) -> gateway.Wait | None:
        """The WAIT that follows a round trip of ``writes`` writes (protocol/gateway.py), its answer
        judged by ``check``; None when ``replicas`` is 0 (no WAIT)."""
        if not self.replicas:
            return None
        return gateway.Wait(
            self.replicas, self.timeout_ms, functools.partial(self.check, writes=writes)
        )

    def check(self, acked: Any, writes: int = 1) -> None:
        """Count and (at most every WARN_EVERY s) log writes that WAIT did not confirm.
        A WAIT refused outright (e.g. NOPERM: the ACL user lacks ``+wait``) is raised."""
        if isinstance(acked, Exception):
            raise acked
        if isinstance(acked, int) and acked >= self.replicas:
            return
        with self._lock:
            self.unreplicated_writes += writes
            now = time.monotonic()
            if now - self._warned < WARN_EVERY:
                return
            self._warned = now
        log.warning(
            "WAIT %d %d: only %s replica(s) confirmed a write (%d so far); a failover "
            "now could lose it. Is a replica down or lagging?",
            self.replicas,
            self.timeout_ms,
            acked,
            self.unreplicated_writes,
        )


class RecentAdds:
    """A Sentinel producer's inventory: the job ids of the adds acknowledged in the last
    ``RECENT_S`` seconds (at most ``RECENT_MAX``), and the primary that took them."""

    def __init__(self) -> None:
        self._ids: deque[tuple[float, str]] = deque(maxlen=RECENT_MAX)
        self._primary: tuple[str, int] | None = None
        self._lock = threading.Lock()

    def note(
        self, primary: tuple[str, int] | None, job_ids: Sequence[str]
    ) -> tuple[tuple[str, int], list[str]] | None:
        """Adds ``job_ids`` were acknowledged by ``primary`` (None: not a Sentinel client,
        nothing kept). If that is a new primary: the old one and the ids it acknowledged in
        the last ``RECENT_S`` s, to look up on the new one."""
        if primary is None:
            return None
        now = time.monotonic()
        moved = None
        with self._lock:
            if self._primary is not None and primary != self._primary:
                moved = (self._primary, [j for t, j in self._ids if now - t <= RECENT_S])
                self._ids.clear()
            self._primary = primary
            self._ids.extend((now, j) for j in job_ids)
        return moved


class ReplicationWatch:
    """Detects a new primary, lost claims and lost enqueues (see the module docstring).

    Two namespace counters only grow: ``fence`` (one per claim) and ``seq`` (one per
    enqueue, retry or next occurrence). The scripts return the value they read before
    their own increments; a value below one this store already saw acknowledged means
    the server lacks acknowledged writes."""

    def __init__(self, client: Any, url: str, prefix: str, record: Record) -> None:
        self._r = client
        self._url = url
        self._prefix = prefix
        self._record = record
        self._lock = threading.Lock()
        self.primary = urls.primary_address(client)
        self._refreshed = 0.0
        self.fence_high = 0  # the highest fence this store was handed
        self.seq_high = 0  # the highest seq an add of this store returned
        self.failovers = 0
        self.lost_claims = 0
        self.lost_writes = 0
        self.recent = RecentAdds()
        self.cause: Callable[[], str] = lambda: FAILOVER  # the store's loss_cause

    def after_claim(
        self, high: int, fence_before: int | None, fences: Sequence[int], reported: bool = False
    ) -> None:
        """Called after a claim with ``fence_high`` as it was when the claim was sent (every
        fence handed out before then was issued before the script ran, so the counter the
        script read, ``fence_before``, must be at least that), and the claimed fences.
        ``reported``: this loss was already recorded (the epoch was gone); only repair."""
        self._watch_primary()
        with self._lock:
            self.fence_high = max(self.fence_high, *fences) if fences else self.fence_high
        if fence_before is None or fence_before >= high:
            return
        lost = high - fence_before
        with self._lock:
            self.lost_claims += lost
        reissued = sum(1 for f in fences if f <= high)
        old = gateway.call(self._r, RAISE, [self._prefix + "fence"], [max(high, *fences, 0)])
        if reported:
            return
        self._alarm(
            f"fence counter was {fence_before}, below fence {high} already handed "
            f"to this replica: at least {lost} acknowledged claim(s) lost"
            f"{f'; {reissued} fence(s) reissued before the repair' if reissued else ''}"
            f"; counter raised from {old}; the affected invocations run again"
        )

    def after_add(
        self, high: int, replies: Sequence[Sequence[Any]], job_ids: Sequence[str] = ()
    ) -> None:
        """Called after adds of ``job_ids`` with ``seq_high`` as it was when they were sent
        and their replies ``[outcome, due_in, seq_before, seq_after]`` (older servers'
        scripts return two items: no seq to check)."""
        moved = self.recent.note(urls.primary_address(self._r), job_ids)
        found = self._look_up(*moved) if moved else 0
        seen = seq_seen(replies)
        if seen is None:
            return
        before, after = seen
        with self._lock:
            if after > self.seq_high:
                self.seq_high = after
        if before >= high:
            return
        old = gateway.call(self._r, RAISE, [self._prefix + "seq"], [self.seq_high])
        if found:  # reported by id already
            return
        with self._lock:
            self.lost_writes += high - before
        self._alarm(lost_writes_detail(before, high, old))

    def _look_up(self, old: tuple[str, int], job_ids: list[str]) -> int:
        """After this producer moved from primary ``old``: look up on the new one the jobs
        ``old`` acknowledged lately; report those missing (``data_loss``); how many."""
        if not job_ids:
            return 0
        try:
            with self._r.pipeline(transaction=False) as p:
                for job_id in job_ids:
                    p.exists(f"{self._prefix}job:{job_id}")
                found = p.execute()
        except Exception as exc:  # noqa: BLE001 - the add itself succeeded
            log.warning("could not look up the enqueues acknowledged before a failover (%s)", exc)
            return 0
        missing = [j for j, n in zip(job_ids, found, strict=True) if not n]
        if missing:
            with self._lock:
                self.lost_writes += len(missing)
            self._alarm(
                f"{len(missing)} of the {len(job_ids)} enqueue(s) acknowledged by "
                f"{old[0]}:{old[1]} in the {RECENT_S:.0f} s before this producer moved to the "
                f"new primary are missing there (lost, unless deleted since): "
                + ", ".join(missing[:5])
                + (", ..." if len(missing) > 5 else "")
            )
        return len(missing)

    def _alarm(self, detail: str) -> None:
        cause = self.cause()
        log_data_loss(self._url, detail, cause)
        self._record("data_loss", detail if cause == FAILOVER else f"{detail}; cause: {cause}")

    def refresh(self) -> None:
        """With a Sentinel URL, ask the sentinels who the primary is, at most every REFRESH
        seconds (redis-py's own ``get_master_address``: a new address drops the pool's idle
        connections, and busy ones when they are released). Without it, a client whose
        connections never broke (a primary paused, then back: a split brain) writes to the
        demoted primary until the sentinels reconfigure it, and those writes are lost."""
        pool = getattr(self._r, "connection_pool", None)
        if not hasattr(pool, "get_master_address"):
            return
        now = time.monotonic()
        if now - self._refreshed < REFRESH:
            return
        self._refreshed = now
        import redis

        try:
            pool.get_master_address()  # type: ignore[union-attr]
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # no sentinel answered, or no primary: the next command will say so

    def _watch_primary(self) -> None:
        address = urls.primary_address(self._r)
        if address is None or address == self.primary:
            return
        with self._lock:
            old, self.primary = self.primary, address
            if old is None:
                return
            self.failovers += 1
        detail = f"primary {old[0]}:{old[1]} -> {address[0]}:{address[1]}"
        log.error(
            "Redis failover at %s: %s; writes acknowledged by the old primary shortly "
            "before it failed may be lost (replication is asynchronous); lost claims "
            "are detected and their invocations run again",
            self._url,
            detail,
        )
        self._record("failover", detail)
