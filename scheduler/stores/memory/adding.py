"""MemoryStore's producers: ``add``, ``add_many`` (one lock hold), and the namespace's key
rules (scheduler/keyrules.py: a job without a limit key gets its task's or its lane's
rule's key when it is added), kept under the store's lock as add.lua keeps them in Redis.

A mixin of ``MemoryStore`` (its state is declared here and in steering.py and views.py,
set by ``MemoryStore.__init__``); each public method holds the store's one lock once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from scheduler import keyrules
from scheduler.flow import queue_of
from scheduler.keyrules import KeyRules
from scheduler.model import AddResult, JobSpec
from scheduler.stores.memory import series
from scheduler.stores.memory.outcomes import OutcomeBook
from scheduler.stores.memory.records import JobRecord
from scheduler.stores.memory.steering import MemorySteering


class MemoryAdding(MemorySteering):
    _generations: itertools.count[int]
    _key_rules: KeyRules = keyrules.EMPTY  # replaced whole by each change (immutable)

    def add(self, spec: JobSpec) -> AddResult:
        with self._lock:
            result = self._add_locked(self._key_rules.keyed(spec), self.clock.now())
        if result.outcome != "unchanged":
            self._wake(result.due_in)
        return result

    def add_many(self, specs: Sequence[JobSpec]) -> list[AddResult]:
        """``add`` for each spec, in order, under one lock hold: every job's key rule is
        applied first, so a job the rules refuse (``KeyRuleError``) leaves nothing of the
        batch written (``BulkAdd``)."""
        with self._lock:
            rules = self._key_rules
            keyed = [rules.keyed(spec) for spec in specs]
            now = self.clock.now()
            results = [self._add_locked(spec, now) for spec in keyed]
        woke = [r.due_in for r in results if r.outcome != "unchanged" and r.due_in is not None]
        if woke:
            self._wake(min(woke))
        return results

    def _add_locked(self, spec: JobSpec, now: float) -> AddResult:
        old = self._jobs.get(spec.job_id)
        if old is not None and not old.cancelled and old.spec == spec:
            return AddResult("unchanged", old.due_in(now))
        job = JobRecord(spec=spec, generation=next(self._generations), anchor=None)
        job.queue = queue_of(spec.lane, spec.priority, spec.limit_key)
        first = series.first(job, now, self.clock.wall())
        if first is None:
            raise ValueError(
                f"the schedule of {spec.job_id!r} has no occurrence after now; nothing was stored"
            )
        if old is not None:
            self._drop_pending_locked(old)
        if spec.recurring:
            job.since = first.scheduled
            if spec.result_ttl is not None:  # every run's outcome kept (outcomes.py)
                self._book = self._book or OutcomeBook()
                self._book.keeping.add(spec.job_id)
        self._jobs[spec.job_id] = job
        self._history.pop(spec.job_id, None)
        self._push_locked(job, first)
        outcome = "replaced" if old is not None and not old.cancelled else "created"
        self._event_locked(now, "scheduled", spec.job_id, first.scheduled, detail=outcome)
        return AddResult(outcome, max(0.0, first.due - now))  # due already (a past At): 0

    # ---- key rules (``LimitKeyRules``, base.py) -------------------------------------------

    def set_key_rule(
        self, template: str | None, *, task: str | None = None, lane: str | None = None
    ) -> bool:
        """Declare (None: remove) the key rule of ``task`` or ``lane``; it applies to the
        jobs added after it. True if it changed."""
        name, text = keyrules.declared(template, task, lane)
        with self._lock:
            changed = self._key_rules.changed(name, text)
            if changed is not None:
                self._key_rules = changed
        return changed is not None

    def key_rules(self) -> dict[str, str]:
        """Every key rule, by name (``task:<name>``, ``lane:<name>``) -> its template."""
        with self._lock:
            return dict(self._key_rules.rules)
