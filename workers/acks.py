"""Batched acknowledgements: successes are committed to the store in batches (one
``complete_many`` call for many invocations) instead of one store call each.

Guarantee: every success handed to ``add`` is committed (or refused, token-checked, per
item) by a ``flush`` or with a claim (``take``, below): when the batch is full, when a
lane's last busy worker finishes (so an idle engine has nothing left unacknowledged;
``recorded`` flushes and waits for batches in flight: ``wait_idle`` implies committed),
and at the latest ``max_delay`` seconds after the first item of the batch (a timer). With
``arm_on_add=False`` (in process: every worker that drains its queue flushes) the timer
is armed only when a job starts while successes wait (``starting``), so a success never
waits behind a long job, and a quiet engine arms no timer at all. A
delayed ack only delays the bookkeeping: the job has already run, and its lease (seconds)
is far longer than the delay (milliseconds).

The timer only *signals*: the store call runs on the acks' own flusher thread, never on
the shared timer thread, whose heartbeats and job timeouts a slow store (a high round
trip) would otherwise starve (measured: leases lapsed and jobs ran twice at 100 ms RTT).

Riding with claims: over a store that takes acks with a claim (Redis), the dispatcher
``take``s what waits whenever it claims and sends it in the claim's round trip, then
reports the outcomes with ``taken`` (an outcome it could not learn goes back into the
batch, and the flusher records it). The flushes above stay as they are, the fallback for
successes that no claim comes for (there the engine gives the timer a longer delay, so
that in a burst the next claim, not the timer, carries them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from scheduler.model import Claim, Commit
from workers import commits, failpoints
from workers.timers import Offloaded, Timers

log = logging.getLogger("duetime.workers")

CompleteMany = Callable[[Sequence[tuple[Claim, Any]]], list[Commit]]


class Acks:
    def __init__(
        self,
        complete_many: CompleteMany,
        timers: Timers,
        *,
        max_delay: float = 0.002,
        max_batch: int = 200,
        on_recorded: Callable[[Sequence[Claim], Sequence[Commit] | None], None] | None = None,
        arm_on_add: bool = True,
    ) -> None:
        """``on_recorded(claims, results)`` runs once per flush, after the batch's
        outcomes were sent: their answers (``Commit.OK``, or the refusal), in order, or
        None when the write was given up. The heartbeat keeps their leases until then,
        and judges a refusal."""
        self._on_recorded = on_recorded
        self._complete_many = complete_many
        self._timers = timers
        self._max_delay = max_delay
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # a batch in flight was settled
        self._in_flight = 0  # batches taken by a claim or being flushed, not yet settled
        self._batch: list[tuple[Claim, Any]] = []
        self._arm_on_add = arm_on_add
        self._armed: int | None = None  # the deadline timer's id, while one is armed
        # batches recorded by a flush (not with a claim): each may have released work
        # due at once that a claim has not seen yet (wait_idle claims once more)
        self.flushed = 0
        self._flusher = Offloaded(self.flush, "duetime-acks")

    def add(self, claim: Claim, result: Any) -> None:
        """Queue the success of ``claim`` for the next flush."""
        with self._lock:
            self._batch.append((claim, result))
            n = len(self._batch)
        if n >= self._max_batch:
            self.flush()
        elif n == 1 and self._arm_on_add:
            self._arm()

    def starting(self) -> None:
        """A job is about to start: successes queued so far get their deadline timer now
        (with ``arm_on_add=False``), so none waits for that job to end."""
        if self._batch and self._armed is None:
            self._arm()

    def _arm(self) -> None:
        with self._lock:
            if self._armed is not None or not self._batch:
                return
            self._armed = -1  # being armed: no second timer
        tid = self._timers.call_later(self._max_delay, self._deadline)
        with self._lock:
            if self._armed == -1:
                self._armed = tid

    def _deadline(self) -> None:
        """On the timer thread: only signal the flusher thread (never a store call here)."""
        with self._lock:
            self._armed = None
        self.send_aside()

    def send_aside(self) -> None:
        """Have the queued successes recorded now on the flusher thread (a claim that must
        not wait for them goes on its own meanwhile); never a store call on this thread."""
        with self._lock:
            due = bool(self._batch)
        if due:
            self._flusher.kick()

    def take(self) -> list[tuple[Claim, Any]]:
        """Every queued success, taken out to be sent with a claim; the caller reports
        their outcomes with ``taken`` (until then the heartbeat keeps their leases)."""
        with self._lock:
            if not self._batch:
                return []
            batch, self._batch = self._batch, []
            armed, self._armed = self._armed, None
            self._in_flight += 1
        if armed is not None and armed >= 0:
            self._timers.cancel(armed)
        try:
            failpoints.hit("before_complete")
        except Exception:  # an injected fault: they go the flusher's way instead
            self.taken(batch, [None] * len(batch))
            return []
        return batch

    def taken(self, batch: Sequence[tuple[Claim, Any]], results: Sequence[Commit | None]) -> None:
        """The outcomes of a ``take``n batch, in order. ``None``: not learned (lost reply,
        store down); those go back into the batch, for the flusher to record (a resend is
        safe: commits are token-checked)."""
        if None not in results:  # the common case: every outcome came back
            try:
                self._settle(batch, cast("Sequence[Commit]", results))
            finally:
                self._landed()
            return
        again: list[tuple[Claim, Any]] = []
        recorded: list[tuple[Claim, Any]] = []
        codes: list[Commit] = []
        for item, result in zip(batch, results, strict=True):
            if result is None:
                again.append(item)
            else:
                recorded.append(item)
                codes.append(result)
        try:
            if again:
                with self._lock:
                    self._batch[:0] = again
                self._flusher.kick()
            if recorded:
                self._settle(recorded, codes)
        finally:
            self._landed()

    def _landed(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._settled.notify_all()

    def recorded(self, timeout: float | None = None) -> bool:
        """Flush what waits and wait until no batch is in flight (taken by a claim, or
        being flushed by another thread): every success added before is then recorded
        (or given up). False on timeout."""
        while True:
            self.flush()
            with self._lock:
                if not self._settled.wait_for(lambda: not self._in_flight, timeout):
                    return False
                if not self._batch:
                    return True

    def pending(self) -> int:
        with self._lock:
            return len(self._batch)

    def flush(self) -> None:
        """Commit every queued success now, in one store call (retried a few times; see
        workers.commits). If it still fails, those invocations' leases expire and they
        run again (at-least-once)."""
        with self._lock:
            batch, self._batch = self._batch, []
            armed, self._armed = self._armed, None
            self._in_flight += bool(batch)
        if armed is not None and armed >= 0:
            self._timers.cancel(armed)  # nothing left for it to flush
        if not batch:
            return
        results: list[Commit] | None = None
        try:
            results = commits.record(
                f"{len(batch)} invocation(s)", lambda: self._complete_many(batch)
            )
        finally:
            self.flushed += 1
            try:
                self._settle(batch, results)
            finally:
                self._landed()

    def _settle(self, batch: Sequence[tuple[Claim, Any]], results: Sequence[Commit] | None) -> None:
        """Report a recorded batch (``results`` None: given up, the leases expire and the
        invocations run again): to ``on_recorded``, and each refusal to the log."""
        if self._on_recorded is not None:
            self._on_recorded([claim for claim, _ in batch], results)
        if results is None:
            return
        for (claim, _), result in zip(batch, results, strict=True):
            if result is not Commit.OK:
                commits.refused(claim, result)
