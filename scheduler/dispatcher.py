"""THE loop, shared by every store: sleep until the next due time, claim what the
workers can start now, hand it over, sleep again.

* It never polls: with nothing due it waits on its condition with no timeout (or the
  store's safety resync, for shared stores); a store wake-up for an earlier job, or a
  worker freeing a slot while due work waits, notifies it.
* It never runs user code: ``submit`` hands each batch of claims to the worker pools
  (in claim order, one hand-off per batch).
* It claims at most the free capacity of each lane, so a busy engine does not hoard work.
* The store judges "due"; a wake-up that comes early just yields an empty batch.
* Over a store that takes acks with a claim (``AcksWithClaims``), the successes waiting
  when it claims (``acks``) travel in the claim's round trip, acks first; their outcomes
  go back to ``acks.taken`` before anything else (the workers' flushes stay the fallback).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from scheduler.clock import Clock
from scheduler.metrics import Metrics
from scheduler.model import Claim, ClaimBatch, Commit
from scheduler.stores.base import AckedClaim, AcksWithClaims, Store

log = logging.getLogger("duetime.dispatcher")


class PendingAcks(Protocol):
    """Successes waiting to be recorded (workers/acks.py), taken to ride with a claim."""

    def take(self) -> Sequence[tuple[Claim, Any]]:
        """The successes waiting now (the caller sends them and calls ``taken``)."""
        ...

    def taken(self, done: Sequence[tuple[Claim, Any]], results: Sequence[Commit | None]) -> None:
        """``done``'s outcomes, in order; ``None``: not recorded, to be recorded again."""
        ...

    def send_aside(self) -> None:
        """Have the successes waiting now recorded on their own, on the acks' thread (in
        parallel with a claim that must not wait for them); never a store call here."""
        ...


class Dispatcher:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        capacity: Callable[[], Mapping[str, int]],
        submit: Callable[[Sequence[Claim], float], None],
        lease: float | None,
        owner: str,
        resync: float | None = None,
        rng: random.Random | None = None,
        retry_backoff: tuple[float, float] = (0.05, 2.0),
        metrics: Metrics | None = None,
        acks: PendingAcks | None = None,
    ) -> None:
        self._store = store
        self._riding = store if acks is not None and isinstance(store, AcksWithClaims) else None
        self._acks = acks
        self._clock = clock
        # a store on this very clock says when its next_due_in counts from (ClaimBatch.since)
        self._same_clock = getattr(store, "clock", None) is clock
        self._capacity = capacity
        self._submit = submit
        self._lease = lease
        self._owner = owner
        self._resync = resync  # safety re-claim period for shared stores (jittered)
        self._rng = rng or random.Random()
        self._backoff_min, self._backoff_max = retry_backoff
        self._backoff = 0.0
        self._metrics = metrics or Metrics()
        self._cond = threading.Condition()
        self._deadline: float | None = None  # clock time of the next due claim (None: none)
        self._dirty = True  # something changed since the last claim: claim again
        self._claiming = False  # a claim is in flight
        self._freed = False  # a worker freed up during it: claim again if it left a lane full
        self._parked = False
        self._starved = False  # the last claim left a lane with no free worker
        self._closed = False
        self._due_round = False  # this round was started by the due-time deadline
        self._again = False  # the last reply said "ask again now" (a burst: more is due)
        self._replied = 0.0  # clock time the last claim's reply arrived
        self.rounds = 0  # claim rounds so far (tests, metrics)
        self._thread = threading.Thread(
            target=self._loop, name=f"duetime-dispatch-{owner}", daemon=True
        )

    @property
    def rides(self) -> bool:
        """True when successes ride with claims (``acks`` given, ``AcksWithClaims`` store)."""
        return self._riding is not None

    @property
    def starved(self) -> bool:
        """True when the last claim left a lane full: due work may be waiting for a
        worker (workers then pull it themselves, see ``Scheduler._refill``)."""
        return self._starved

    def start(self) -> None:
        self._thread.start()

    # ---- wake-ups ---------------------------------------------------------------------

    def poke(self) -> None:
        """Claim again now (something may have become due or claimable)."""
        with self._cond:
            self._dirty = True
            self._cond.notify()

    def poke_if_earlier(self, due_in: float | None) -> None:
        """A job became pending ``due_in`` seconds from now: wake only if that is earlier
        than what the loop waits for (or a claim is in flight and may have missed it)."""
        with self._cond:
            if self._dirty:
                return
            if (
                self._claiming
                or due_in is None
                or self._deadline is None
                or self._clock.now() + due_in < self._deadline
            ):
                self._dirty = True
                self._cond.notify()

    def poke_capacity(self) -> None:
        """A worker became free: claim again only if due work may be waiting for one."""
        self.claim_follows()

    def claim_follows(self, within: float = 0.0) -> bool:
        """``poke_capacity``; True if a claim round follows, now or after the one in
        flight, or is due within ``within`` seconds: successes waiting now can ride with
        it (``acks``)."""
        with self._cond:
            if self._closed:
                return False
            if self._claiming and not self._starved:
                self._freed = True  # judged when the claim in flight returns (_park_after)
                # a round follows it if that claim leaves a lane full; if none does, what
                # waits is sent aside when it returns (_park_after), not left to a timer
                return True
            elif self._starved and not self._dirty:
                self._dirty = True
                self._cond.notify()
            return self._dirty or (
                not self._claiming
                and self._deadline is not None
                and self._deadline - self._clock.now() <= within
            )

    # ---- the loop ---------------------------------------------------------------------

    def _loop(self) -> None:
        while self._wait_for_work():
            try:
                self._park_after(*self._claim())
            except Exception as exc:  # a last guard: the loop must outlive any bug
                log.exception("dispatch round failed")
                self._back_off(exc)
                self._park_after(None, False)

    def _wait_for_work(self) -> bool:
        """Sleep until dirty or the deadline passes. False when closed."""
        with self._cond:
            while not self._closed and not self._dirty:
                if self._deadline is not None and self._deadline <= self._clock.now():
                    break
                self._parked = True
                self._cond.notify_all()  # wait_quiet() watchers
                self._clock.wait_until(self._cond, self._deadline)
                self._parked = False
            if self._closed:
                return False
            # the deadline of a job's due time passed (not an "ask again now" in a burst,
            # whose successes ride with the claim as a freed worker's would)
            self._due_round = not self._dirty and not self._again
            self._dirty = False
            self._claiming = True
            return True

    def _claim(self) -> tuple[ClaimBatch | None, bool]:
        """One claim round. Returns the batch (None if the store failed) and whether a
        lane is now full (due work may be waiting for a free worker)."""
        capacity = dict(self._capacity())
        # the leases start when the store claims, before the reply arrives: a claim's age
        # counts from the request, so a slow reply never makes a lease look younger
        asked = self._clock.now()
        try:
            batch = self._claim_due(capacity)
        except Exception as exc:  # the store is unreachable or broken: keep going
            self._back_off(exc)
            self._metrics.claim_round(exc)
            return None, False
        self._replied = self._clock.now()  # what the batch's next_due_in counts from
        self._backoff = 0.0
        self._metrics.claim_round(None)
        if batch.claims:
            self._submit(batch.claims, asked)
            for claim in batch.claims:
                capacity[claim.lane] -= 1
        if self._due_round and self._riding is not None and self._acks is not None:
            self._acks.send_aside()  # after the hand-off: the due jobs did not wait for them
        self.record(batch)
        return batch, any(free <= 0 for free in capacity.values())

    def _claim_due(self, capacity: Mapping[str, int]) -> ClaimBatch:
        """``claim_due``, with the waiting successes in the same round trip if the store
        takes them (their outcomes reported first, whatever happens to the claim). A round
        the due-time deadline started claims alone: its jobs are due now, and acks sent
        first in its round trip would start them later by the acks' script time (lag p99
        +0.2 to +0.7 ms at a steady trickle); the waiting successes are sent once its jobs
        are handed off (``_claim``), from the acks' thread. Rounds started by freed workers
        (a burst) take them along."""
        acks = None if self._riding is None or self._due_round else self._acks
        done = acks.take() if acks is not None else ()
        if not done:
            return self._store.claim_due(capacity, self._lease, self._owner)
        assert self._riding is not None and acks is not None  # both set when riding
        try:
            out = self._riding.complete_and_claim(done, capacity, self._lease, self._owner)
        except Exception as exc:  # it should not raise; if it does, nothing was learned
            out = AckedClaim([None] * len(done), None, exc)
        try:
            acks.taken(done, out.acks)
        except Exception:  # a bug there must not strand the claims made
            log.exception("settling the acks sent with a claim failed")
        if out.error is not None:
            raise out.error
        assert out.batch is not None
        return out.batch

    def _back_off(self, exc: Exception) -> None:
        self._backoff = min(self._backoff_max, max(self._backoff_min, self._backoff * 2))
        if getattr(exc, "logged", False):  # the store already reported it, rate-limited
            return
        log.warning("claiming failed (%s); retrying in %.2fs", exc, self._backoff)

    def _park_after(self, batch: ClaimBatch | None, starved: bool) -> None:
        """Record when to claim next. A worker that freed up during the claim set
        ``_freed``: if the claim left a lane full (due work may wait for that worker), the
        loop claims again at once, so no free slot goes unnoticed; else every due job
        was claimed, and nothing waits for it."""
        aside = False
        with self._cond:
            self.rounds += 1
            self._claiming = False
            self._starved = starved
            if self._freed:
                self._freed = False
                self._dirty = self._dirty or starved
                # no round follows for the freed workers: what they left waiting is
                # recorded now (claim_follows told them a round might carry it)
                aside = not self._dirty
            if batch is None:
                self._deadline = self._clock.now() + self._backoff
                self._again = False
            else:
                due_in = batch.next_due_in
                if self._resync is not None:
                    # spread replicas' resyncs over [0.5, 1.5) x resync: no lockstep
                    resync = self._resync * (0.5 + self._rng.random())
                    due_in = resync if due_in is None else min(due_in, resync)
                # from the reply, not from now: the hand-off since must not delay the wake;
                # from the store's own reading of this clock if it has one (a test clock
                # advanced during the claim would otherwise push the wake past the job)
                since = batch.since if batch.since is not None and self._same_clock else None
                base = self._replied if since is None else since
                self._deadline = None if due_in is None else base + due_in
                self._again = due_in == 0.0
        if aside and self._riding is not None and self._acks is not None:
            self._acks.send_aside()

    def record(self, batch: ClaimBatch) -> None:
        """Report the batch's claims and their dispatch lag (in the store's clock), from
        when each became claimable: a job enqueued for a past time is not late."""
        now = batch.now
        if now is not None and batch.claims:
            self._metrics.claimed_many(
                [
                    (c.lane, now - (c.scheduled if c.ready is None else c.ready))
                    for c in batch.claims
                ]
            )

    # ---- lifecycle and test support ------------------------------------------------------

    def close(self) -> None:
        """Stop claiming. Returns once the loop has exited (no claim in flight)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def wait_quiet(self, timeout: float | None = None) -> bool:
        """Block until the loop is parked with nothing due now and no wake-up pending."""

        def quiet() -> bool:
            return self._closed or (
                self._parked
                and not self._dirty
                and (self._deadline is None or self._deadline > self._clock.now())
            )

        with self._cond:
            return self._cond.wait_for(quiet, timeout)
