"""Lease heartbeats: renew every running claim in one batch, every lease/3, off the jobs'
threads. A claim whose renewal is refused while its job still runs has lost its lease:
its job is told to stop (cancel token, reason "lease lost") and its completion will be
refused by the store.

A renewal can be refused for a claim that is no longer held: the heartbeat snapshots the
claims it holds, and by the time the store answers, a job may have finished and its
outcome been recorded (which ends the lease). That is not a loss. Nor is a refusal for a
claim whose outcome is being recorded (``finishing``): the commit's own answer tells
whether the lease was still ours (``settled``), and a refused commit is reported once,
there. So a loss is reported (logged, counted) only for a claim still held and running,
or by a refused commit; never twice for one claim.

A process that exits with jobs still running (its shutdown timed out) hands their leases
back (``hand_back``): they end at once, so another replica runs those jobs again as
after a crash, without waiting for the leases to lapse.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from scheduler.metrics import Metrics
from scheduler.model import Claim, Commit
from scheduler.stores.base import Interrupts, Store
from workers import failpoints
from workers.context import INTERRUPTED, CancelToken, log_fields
from workers.timers import Offloaded, Timers

log = logging.getLogger("duetime.workers")

HAND_BACK = 0.001  # seconds: the lease a handed-back claim is renewed to (it ends now)


class Heartbeat:
    def __init__(
        self,
        store: Store,
        timers: Timers,
        lease: float,
        metrics: Metrics | None = None,
        owner: str = "",
    ) -> None:
        self._store = store
        self._owner = owner  # the replica, for its log lines' fields
        self._metrics = metrics or Metrics()
        self._timers = timers
        self._lease = lease
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Claim, CancelToken]] = {}
        self._finishing: set[str] = set()  # tokens whose outcome is being recorded
        self._ticking = False
        self._calls = threading.Lock()  # one renewal call at a time
        self._handed_back = False
        # the renewal is a store call: it runs on its own thread, never the timer thread
        self._beater = Offloaded(self._beat, "duetime-heartbeat")

    @property
    def lease(self) -> float:
        return self._lease

    def hold(self, claim: Claim, token: CancelToken) -> None:
        with self._lock:
            self._held[claim.token] = (claim, token)
            start = not self._ticking
            self._ticking = True
        if start:
            self._timers.call_later(self._lease / 3, self._beater.kick)

    def finishing(self, claim: Claim) -> None:
        """The job of ``claim`` returned and its outcome is about to be recorded: its lease
        is still renewed, but a refused renewal is left to the commit to judge."""
        # No lock: the set's add is atomic under the GIL, and a renewal judged just before
        # it (the lock would only have made this wait for that judgement) is the same race
        # as with the lock. A token added after its claim was dropped as lost is discarded
        # by ``settled`` or ``drop``, one of which always follows.
        if claim.token in self._held:
            self._finishing.add(claim.token)

    def settled(self, claim: Claim, result: Commit | None) -> None:
        """The outcome of ``claim`` was recorded (``result``; None: given up, the lease
        will expire): stop renewing it. A refused commit is a lost lease, reported here
        unless the heartbeat reported it already; NOT_FOUND (the job was deleted while
        it ran) is not."""
        with self._lock:
            held = self._held.pop(claim.token, None)
            self._finishing.discard(claim.token)
        if held is None or result is None or result in (Commit.OK, Commit.NOT_FOUND):
            return  # NOT_FOUND: the job was deleted while it ran, no lease was lost
        self._lost([(claim, held[1])], [result], "when recording its outcome")

    def settled_many(self, claims: Sequence[Claim], results: Sequence[Commit] | None) -> None:
        """``settled`` for a batch of recorded outcomes, in one lock hold (batched acks;
        ``results`` None: the write was given up)."""
        refused: list[tuple[Claim, CancelToken]] = []
        why: list[Commit] = []
        with self._lock:
            for i, claim in enumerate(claims):
                held = self._held.pop(claim.token, None)
                self._finishing.discard(claim.token)
                result = None if results is None else results[i]
                if held is None or result is None or result in (Commit.OK, Commit.NOT_FOUND):
                    continue
                refused.append((claim, held[1]))
                why.append(result)
        self._lost(refused, why, "when recording its outcome")

    def drop(self, claim: Claim) -> None:
        with self._lock:
            self._held.pop(claim.token, None)
            self._finishing.discard(claim.token)

    def renew_one(self, claim: Claim) -> bool:
        """Renew one claim now (before starting a job that waited). False if lost."""
        try:
            failpoints.hit("renew")
            return self._store.renew([claim], self._lease) == [Commit.OK]
        except Exception as exc:  # unreachable store: we cannot prove we still own it
            if not getattr(exc, "logged", False):  # a corrupt key: reported, rate-limited
                log.warning("renewing %s failed: %s", claim.invocation_id, exc)
            return False

    def hand_back(self) -> int:
        """This process exits while the jobs it holds still run (a shutdown timed out):
        end their leases now, so that the next claim of any replica reaps them as after a
        crash (attempt+1; at-most-once: abandoned), instead of a whole lease later. No
        renewal follows. A claim whose outcome is being recorded is left to its commit.
        Returns how many leases were ended."""
        with self._calls:  # a renewal in flight must not extend what is handed back
            with self._lock:
                self._handed_back = True
                held = [c for t, (c, _) in self._held.items() if t not in self._finishing]
                for claim in held:
                    del self._held[claim.token]
            if not held:
                return 0
            try:
                results = self._store.renew(held, HAND_BACK)
            except Exception as exc:  # unreachable: the leases lapse on their own
                log.warning("could not hand back %d running jobs (%s)", len(held), exc)
                return 0
        return sum(1 for r in results if r is Commit.OK)

    def _beat(self) -> None:
        with self._calls:
            if not self._handed_back:
                self._renew_held()

    def _renew_held(self) -> None:
        with self._lock:
            held = list(self._held.values())
            if not held:
                self._ticking = False
                return
        # the next beat, armed first: a third of the lease from this one however long its
        # store calls take (one that comes while they run waits for them: Offloaded)
        self._timers.call_later(self._lease / 3, self._beater.kick)
        try:
            failpoints.hit("renew")
            results = self._store.renew([c for c, _ in held], self._lease)
        except Exception as exc:  # keep running what we hold; the store decides at commit
            if not getattr(exc, "logged", False):  # a corrupt key: reported, rate-limited
                log.warning("lease renewal failed (%s); %d running jobs keep going", exc, len(held))
            return
        lost: list[tuple[Claim, CancelToken]] = []
        why: list[Commit] = []
        with self._lock:  # judged against what is held now, not at the snapshot
            for (claim, token), result in zip(held, results, strict=True):
                if result is Commit.OK:
                    continue
                if claim.token not in self._held or claim.token in self._finishing:
                    continue  # finished meanwhile: its commit ended the lease, or will judge
                del self._held[claim.token]
                if result is Commit.QUARANTINED:  # its data did not parse: moved aside
                    log.error(
                        "job %s invocation %s: moved aside", claim.job_id, claim.invocation_id
                    )
                    token.cancel("quarantined")
                    continue
                lost.append((claim, token))
                why.append(result)
        self._metrics.renewed(sum(1 for r in results if r is Commit.OK))
        self._lost(lost, why, "at renewal")
        self._stop_interrupted()

    def _stop_interrupted(self) -> None:
        """Cancel the tokens of the held invocations whose job another process asked to
        stop (``cancel(interrupt=True)``: the store's ``interrupted``), as a local
        ``cancel(interrupt=True)`` does."""
        if not isinstance(self._store, Interrupts):
            return
        with self._lock:
            running = [(c, t) for c, t in self._held.values() if t.reason is None]
        if not running:
            return
        try:
            asked = self._store.interrupted({c.job_id for c, _ in running})
        except Exception as exc:  # asked again at the next renewal
            log.warning("could not read the interrupt requests (%s)", exc)
            return
        for claim, token in running:
            if claim.job_id in asked:
                log.info(
                    "job %s invocation %s: interrupted",
                    *(claim.job_id, claim.invocation_id),
                    extra=log_fields(claim, "interrupted", self._owner),
                )
                token.cancel(INTERRUPTED)

    def _lost(self, lost: list[tuple[Claim, CancelToken]], why: list[Commit], when: str) -> None:
        if not lost:
            return
        self._metrics.lease_lost(len(lost))
        for (claim, token), result in zip(lost, why, strict=True):
            log.warning(
                "lease lost: job %s invocation %s attempt %d (%s, %s)",
                claim.job_id,
                claim.invocation_id,
                claim.attempt,
                result.value,
                when,
            )
            token.cancel("lease lost")
