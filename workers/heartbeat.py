"""Lease heartbeats: renew every running claim in one batch, every lease/3, off the jobs'
threads. A claim whose renewal is refused has lost its lease: its job is told to stop
(cancel token, reason "lease lost") and its completion will be refused by the store."""

from __future__ import annotations

import logging
import threading

from scheduler.metrics import Metrics
from scheduler.model import Claim, Commit
from scheduler.stores.base import Store
from workers import failpoints
from workers.context import CancelToken
from workers.timers import Offloaded, Timers

log = logging.getLogger("duetime.workers")


class Heartbeat:
    def __init__(
        self, store: Store, timers: Timers, lease: float, metrics: Metrics | None = None
    ) -> None:
        self._store = store
        self._metrics = metrics or Metrics()
        self._timers = timers
        self._lease = lease
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Claim, CancelToken]] = {}
        self._ticking = False
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

    def drop(self, claim: Claim) -> None:
        with self._lock:
            self._held.pop(claim.token, None)

    def renew_one(self, claim: Claim) -> bool:
        """Renew one claim now (before starting a job that waited). False if lost."""
        try:
            failpoints.hit("renew")
            return self._store.renew([claim], self._lease) == [Commit.OK]
        except Exception as exc:  # unreachable store: we cannot prove we still own it
            if not getattr(exc, "logged", False):  # a corrupt key: reported, rate-limited
                log.warning("renewing %s failed: %s", claim.invocation_id, exc)
            return False

    def _beat(self) -> None:
        with self._lock:
            held = list(self._held.values())
            if not held:
                self._ticking = False
                return
        try:
            failpoints.hit("renew")
            results = self._store.renew([c for c, _ in held], self._lease)
        except Exception as exc:  # keep running what we hold; the store decides at commit
            if not getattr(exc, "logged", False):  # a corrupt key: reported, rate-limited
                log.warning("lease renewal failed (%s); %d running jobs keep going", exc, len(held))
            results = [Commit.OK] * len(held)
        lost = sum(1 for r in results if r is not Commit.OK)
        self._metrics.renewed(len(results) - lost)
        if lost:
            self._metrics.lease_lost(lost)
        for (claim, token), result in zip(held, results, strict=True):
            if result is not Commit.OK:
                log.warning(
                    "lease lost: job %s invocation %s attempt %d (%s)",
                    claim.job_id,
                    claim.invocation_id,
                    claim.attempt,
                    result.value,
                )
                token.cancel("lease lost")
                self.drop(claim)
        self._timers.call_later(self._lease / 3, self._beater.kick)
