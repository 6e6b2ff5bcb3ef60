"""What a ``ShardedStore`` knows between claim rounds (sharding/sharded.py's "Claiming"): per shard,
when it may next have work (its estimate), which lanes that estimate covers, which lanes
it filled last time (more may wait), whether a sweep must visit it, and whether its last
claim failed. The estimates come from claim replies and wake-ups; wake-ups are trusted
only while the subscriber is connected. Thread-safe: the dispatcher's claims and the
subscriber's wake-ups meet here, under one lock.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Collection, Mapping

from scheduler.clock import Clock
from scheduler.model import ClaimBatch

log = logging.getLogger("duetime.redis")

SHARD_RETRY = 1.0  # seconds before a shard whose claim failed is asked again


class Estimates:
    """The per-shard estimates of ``n`` shards; times are on ``clock``; a sweep (every
    shard visited whatever its estimate) every ``resync`` s, jittered by ``rng``."""

    def __init__(self, n: int, clock: Clock, resync: float, rng: random.Random) -> None:
        self.n = n
        self._clock = clock
        self._resync = resync
        self._rng = rng
        self._lock = threading.Lock()
        self._due = [0.0] * n  # clock time a shard may next have work
        self._covered: list[frozenset[str]] = [frozenset()] * n  # lanes _due covers
        self._hot: list[set[str]] = [set() for _ in range(n)]  # lanes it filled
        self._sweep: set[int] = set(range(n))  # shards to visit whatever their estimate
        self._sweep_at = 0.0
        self._woken = [0] * n  # wake-ups seen per shard (races with claims)
        self._failing: set[int] = set()  # shards whose last claim failed (logged once)
        self._start = 0
        self._trusted = False  # the wake subscriber is connected

    def order(self, now: float) -> list[int]:
        """The shards in the order a round visits them: earliest estimate first (oldest
        work first), ties in an order whose start rotates on every call. Starts a sweep
        when one is due (always, without a live subscription)."""
        with self._lock:
            if not self._trusted:
                self._sweep = set(range(self.n))
            elif now >= self._sweep_at:
                self._sweep = set(range(self.n))
                self._sweep_at = now + self._resync * (0.5 + self._rng.random())
            start, self._start = self._start, (self._start + 1) % self.n
            return sorted(
                range(self.n), key=lambda i: (min(self._due[i], now), (i - start) % self.n)
            )

    def visit(self, i: int, wanted: frozenset[str], now: float) -> int | None:
        """Whether shard ``i`` may have work of the lanes ``wanted`` at ``now``: ``None`` if
        not, else its wake-up count (to hand back to ``answered``)."""
        with self._lock:
            if (
                i in self._sweep
                or self._due[i] <= now
                or bool(wanted - self._covered[i])
                or bool(wanted & self._hot[i])
            ):
                return self._woken[i]
            return None

    def answered(
        self, i: int, batch: ClaimBatch, wanted: frozenset[str], full: set[str], woken: int
    ) -> None:
        """Shard ``i`` answered a claim of the lanes ``wanted`` with ``batch``, filling the
        lanes ``full``; ``woken``: what ``visit`` returned."""
        with self._lock:
            t = self._clock.now()
            nxt = math.inf if batch.next_due_in is None else t + batch.next_due_in
            if full and batch.now is not None:  # more may wait, due since the last one
                last = max(c.scheduled for c in batch.claims if c.lane in full)
                nxt = min(nxt, t + last - batch.now)
            self._due[i] = t if self._woken[i] != woken else nxt  # woken meanwhile
            self._covered[i] = wanted
            self._hot[i] = (self._hot[i] - wanted) | full
            self._sweep.discard(i)
            self._failing.discard(i)  # it answers again

    def set_aside(self, i: int, wanted: frozenset[str], now: float, exc: Exception) -> None:
        """Shard ``i`` failed to claim: asked again in ``SHARD_RETRY`` s, logged once until it
        answers (first in every round, it stopped the claims of every shard)."""
        with self._lock:
            self._due[i] = now + SHARD_RETRY
            self._covered[i] = self._covered[i] | wanted
            self._hot[i] = self._hot[i] - wanted
            self._sweep.discard(i)
            first = i not in self._failing
            self._failing.add(i)
        if first:
            log.warning("claiming from shard %d failed (%s); the other shards go on", i, exc)

    def next_due_in(self, left: Mapping[str, int], now: float) -> float | None:
        """When to claim again: the earliest shard estimate (0 for shards still to visit
        for a lane with capacity left); with no capacity left, only future estimates (a
        freed worker pokes the dispatcher), so a full replica never spins."""
        lanes = {lane for lane, n in left.items() if n > 0}
        with self._lock:
            times = [self._sweep_at] if self._trusted else []
            for i in range(self.n):
                if lanes and (i in self._sweep or lanes & self._hot[i] or lanes - self._covered[i]):
                    times.append(now)
                elif lanes or self._due[i] > now:
                    times.append(self._due[i])
        first = min(times, default=math.inf)
        return None if first == math.inf else max(0.0, first - now)

    def learn(self, shards: Collection[int], at: float, woken: bool = False) -> None:
        """Shards ``shards`` may have work from clock time ``at`` (an add's due time, or a
        wake-up: ``woken``, which a claim then in flight must not overwrite)."""
        with self._lock:
            for i in shards:
                self._due[i] = min(self._due[i], at)
                if woken:
                    self._woken[i] += 1

    def trust(self, connected: bool) -> None:
        """The wake subscriber (re)connected (a sweep follows: it may have missed
        wake-ups), or lost its connection (estimates are no longer trusted)."""
        with self._lock:
            self._trusted = connected
            if connected:
                self._sweep = set(range(self.n))
