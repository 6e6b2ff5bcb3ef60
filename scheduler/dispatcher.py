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
  When they ride is ``AckRides``'s policy.
* A store that refuses the namespace for good (``LayoutRefusedError``: a newer duetime
  wrote data this version would misread) ends the loop: it says so once, claims nothing
  more, and the metrics hear of it (``duetime run`` then stops: cli/replica.py).

The loop's state is ``LoopState``: where the loop is (``Phase``), why the round in flight
started (``Round``), and the three things a round leaves behind (a wake-up asked for, a
worker freed while it claimed, a lane it left full), each changed by a named transition.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.clock import Clock
from scheduler.errors import LayoutRefusedError
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


class Phase(enum.Enum):
    """Where the loop is."""

    AWAKE = "awake"  # between rounds: deciding whether to claim or sleep
    PARKED = "parked"  # asleep on the condition until a wake-up or the deadline
    CLAIMING = "claiming"  # a claim is in flight (the condition is not held)
    CLOSED = "closed"  # stopped: no round starts again


class Round(enum.Enum):
    """Why a claim round started."""

    WOKEN = "woken"  # a wake-up: a new or earlier job, a freed worker, a lane left full
    DUE = "due"  # the deadline of a job's due time passed
    AGAIN = "again"  # the last reply said more is due now (a burst, claimed in batches)


@dataclass
class LoopState:
    """The dispatcher's state; every change is one of the transitions below, made under
    the dispatcher's condition.

    ``woken``: claim again as soon as the loop is free (``wake``). ``freed``: a worker
    freed up while a claim was in flight (judged when it returns). ``starved``: the last
    claim left a lane with no free worker (due work may be waiting for one).
    ``deadline``: the clock time of the next claim without a wake-up (None: none), and
    ``deadline_round`` what it is for (a due time, or "again now").
    """

    phase: Phase = Phase.AWAKE
    reason: Round = Round.WOKEN
    woken: bool = True  # the first round claims at once
    freed: bool = False
    starved: bool = False
    deadline: float | None = None
    deadline_round: Round = Round.DUE

    def wake(self) -> None:
        self.woken = True

    def park(self) -> None:
        """AWAKE -> PARKED: about to sleep."""
        if self.phase is Phase.AWAKE:
            self.phase = Phase.PARKED

    def unpark(self) -> None:
        """PARKED -> AWAKE: a notify or the deadline ended the sleep."""
        if self.phase is Phase.PARKED:
            self.phase = Phase.AWAKE

    def close(self) -> None:
        """Any phase -> CLOSED, for good (a claim in flight ends first)."""
        self.phase = Phase.CLOSED

    def note_freed(self) -> None:
        """A worker freed up while a claim is in flight: judged in ``end_round``."""
        self.freed = True

    def start_round(self) -> None:
        """AWAKE -> CLAIMING: the round's reason is a wake-up, else its deadline's."""
        self.reason = Round.WOKEN if self.woken else self.deadline_round
        self.woken = False
        self.phase = Phase.CLAIMING

    def end_round(self, starved: bool, deadline: float | None, again: bool) -> bool:
        """CLAIMING -> AWAKE, with when to claim next. A worker freed during the claim
        makes the loop claim again at once if the claim left a lane full; returns True
        when it does not (nothing follows for the freed worker's waiting successes)."""
        if self.phase is Phase.CLAIMING:
            self.phase = Phase.AWAKE
        self.starved = starved
        self.deadline = deadline
        self.deadline_round = Round.AGAIN if again else Round.DUE
        if not self.freed:
            return False
        self.freed = False
        self.woken = self.woken or starved
        return not self.woken

    def quiet(self, now: float) -> bool:
        """Parked with nothing due now and no wake-up pending (or closed)."""
        return self.phase is Phase.CLOSED or (
            self.phase is Phase.PARKED
            and not self.woken
            and (self.deadline is None or self.deadline > now)
        )


class AckRides:
    """When the successes waiting ride with a claim (a store that takes both in one round
    trip, ``AcksWithClaims``). A round its deadline started (``Round.DUE``) claims alone:
    its jobs are due now, and acks sent first in its round trip would start them later by
    the acks' script time (lag p99 +0.2 to +0.7 ms at a steady trickle); the waiting
    successes are sent aside once its jobs are handed off, from the acks' thread. Rounds
    a wake-up or a burst started take them along."""

    def __init__(self, store: AcksWithClaims, acks: PendingAcks) -> None:
        self._store = store
        self._acks = acks

    def claim_due(
        self, reason: Round, capacity: Mapping[str, int], lease: float | None, owner: str
    ) -> ClaimBatch | None:
        """The claim with the waiting successes (their outcomes reported first, whatever
        happens to the claim); None when none ride (the caller claims alone)."""
        done = () if reason is Round.DUE else self._acks.take()
        if not done:
            return None
        try:
            out = self._store.complete_and_claim(done, capacity, lease, owner)
        except Exception as exc:  # it should not raise; if it does, nothing was learned
            out = AckedClaim([None] * len(done), None, exc)
        try:
            self._acks.taken(done, out.acks)
        except Exception:  # a bug there must not strand the claims made
            log.exception("settling the acks sent with a claim failed")
        if out.error is not None:
            raise out.error
        assert out.batch is not None
        return out.batch

    def handed_off(self, reason: Round) -> None:
        """A round's claims are with the workers: a due round's waiting successes go now."""
        if reason is Round.DUE:
            self._acks.send_aside()

    def none_follows(self) -> None:
        """No round follows for a freed worker: what it left waiting is recorded now."""
        self._acks.send_aside()


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
        riding = acks is not None and isinstance(store, AcksWithClaims)
        self._rides = AckRides(store, acks) if riding else None  # type: ignore[arg-type]
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
        self._state = LoopState()  # changed under _cond only
        self._replied = 0.0  # clock time the last claim's reply arrived
        self.rounds = 0  # claim rounds so far (tests, metrics)
        self._thread = threading.Thread(
            target=self._loop, name=f"duetime-dispatch-{owner}", daemon=True
        )

    @property
    def rides(self) -> bool:
        """True when successes ride with claims (``acks`` given, ``AcksWithClaims`` store)."""
        return self._rides is not None

    @property
    def starved(self) -> bool:
        """True when the last claim left a lane full: due work may be waiting for a
        worker (workers then pull it themselves, see ``Scheduler._refill``)."""
        return self._state.starved

    def start(self) -> None:
        self._thread.start()

    # ---- wake-ups ---------------------------------------------------------------------

    def poke(self) -> None:
        """Claim again now (something may have become due or claimable)."""
        with self._cond:
            self._state.wake()
            self._cond.notify()

    def poke_if_earlier(self, due_in: float | None) -> None:
        """A job became pending ``due_in`` seconds from now: wake only if that is earlier
        than what the loop waits for (or a claim is in flight and may have missed it)."""
        with self._cond:
            st = self._state
            if st.woken:
                return
            if (
                st.phase is Phase.CLAIMING
                or due_in is None
                or st.deadline is None
                or self._clock.now() + due_in < st.deadline
            ):
                st.wake()
                self._cond.notify()

    def poke_capacity(self) -> None:
        """A worker became free: claim again only if due work may be waiting for one."""
        self.claim_follows()

    def claim_follows(self, within: float = 0.0) -> bool:
        """``poke_capacity``; True if a claim round follows, now or after the one in
        flight, or is due within ``within`` seconds: successes waiting now can ride with
        it (``acks``)."""
        with self._cond:
            st = self._state
            if st.phase is Phase.CLOSED:
                return False
            if st.phase is Phase.CLAIMING and not st.starved:
                st.note_freed()
                # a round follows it if that claim leaves a lane full; if none does, what
                # waits is sent aside when it returns (_park_after), not left to a timer
                return True
            if st.starved and not st.woken:
                st.wake()
                self._cond.notify()
            return st.woken or (
                st.phase is not Phase.CLAIMING
                and st.deadline is not None
                and st.deadline - self._clock.now() <= within
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
        """Sleep until a wake-up or the deadline, then start a round. False when closed."""
        with self._cond:
            st = self._state
            while st.phase is not Phase.CLOSED and not st.woken:
                if st.deadline is not None and st.deadline <= self._clock.now():
                    break
                st.park()
                self._cond.notify_all()  # wait_quiet() watchers
                self._clock.wait_until(self._cond, st.deadline)
                st.unpark()
            if st.phase is Phase.CLOSED:
                return False
            st.start_round()
            return True

    def _claim(self) -> tuple[ClaimBatch | None, bool]:
        """One claim round. Returns the batch (None if the store failed) and whether a
        lane is now full (due work may be waiting for a free worker)."""
        capacity = dict(self._capacity())
        reason = self._state.reason  # set by start_round; only this thread starts rounds
        # the leases start when the store claims, before the reply arrives: a claim's age
        # counts from the request, so a slow reply never makes a lease look younger
        asked = self._clock.now()
        try:
            batch = self._claim_due(capacity, reason)
        except LayoutRefusedError as exc:  # for good: nothing this version does there succeeds
            self._refuse(exc)
            return None, False
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
        if self._rides is not None:
            self._rides.handed_off(reason)  # after the hand-off: due jobs did not wait for acks
        self.record(batch)
        return batch, any(free <= 0 for free in capacity.values())

    def _claim_due(self, capacity: Mapping[str, int], reason: Round) -> ClaimBatch:
        """``claim_due``, with the waiting successes in the same round trip when they ride
        (``AckRides``)."""
        if self._rides is not None:
            batch = self._rides.claim_due(reason, capacity, self._lease, self._owner)
            if batch is not None:
                return batch
        return self._store.claim_due(capacity, self._lease, self._owner)

    def _refuse(self, exc: LayoutRefusedError) -> None:
        """Stop claiming for good: said once, at ERROR; the metrics hear of it."""
        log.error(
            "claiming stopped: %s. This replica claims nothing more: upgrade it to the "
            "version that wrote the namespace",
            exc,
        )
        self._metrics.claim_round(exc)
        with self._cond:
            self._state.close()
            self._cond.notify_all()

    def _back_off(self, exc: Exception) -> None:
        self._backoff = min(self._backoff_max, max(self._backoff_min, self._backoff * 2))
        if getattr(exc, "logged", False):  # the store already reported it, rate-limited
            return
        log.warning("claiming failed (%s); retrying in %.2fs", exc, self._backoff)

    def _park_after(self, batch: ClaimBatch | None, starved: bool) -> None:
        """Record when to claim next (``LoopState.end_round``): from the reply's
        ``next_due_in``, the resync period, or the back-off after a failed claim."""
        with self._cond:
            self.rounds += 1
            deadline: float | None
            if batch is None:
                deadline, again = self._clock.now() + self._backoff, False
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
                deadline = None if due_in is None else base + due_in
                again = due_in == 0.0
            none_follows = self._state.end_round(starved, deadline, again)
        if none_follows and self._rides is not None:
            self._rides.none_follows()

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
            self._state.close()
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def wait_quiet(self, timeout: float | None = None) -> bool:
        """Block until the loop is parked with nothing due now and no wake-up pending."""

        with self._cond:
            return self._cond.wait_for(lambda: self._state.quiet(self._clock.now()), timeout)
