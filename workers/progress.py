"""``current_invocation().progress(value)``: a running job's progress, written to the
store at most once per ``INTERVAL`` per invocation (docs/results.md).

The first report of an invocation is written at once (on the job's thread); a report
within ``INTERVAL`` of a write is held, replacing the one held before, and written when
the interval ends (one write, from a helper thread: the timer thread never waits for a
store). A job that reports in a tight loop thus costs its store one write a second. A
write the store refuses (the lease was lost) or fails to make is dropped: progress is a
hint, never a reason to fail the job.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from scheduler import validation
from scheduler.model import Claim
from scheduler.stores.base import ReportsProgress, Store
from workers.timers import Offloaded, Timers

INTERVAL = 1.0  # seconds between two writes of one invocation's progress

log = logging.getLogger("duetime.workers")


class ProgressReports:
    """The progress reports of one engine's running invocations."""

    def __init__(self, store: Store, timers: Timers) -> None:
        self._store = store if isinstance(store, ReportsProgress) else None
        self._timers = timers
        self._lock = threading.Lock()
        self._held: dict[str, list[Any]] = {}  # token -> [claim, held text or None]
        self._due: list[tuple[Claim, str]] = []  # held reports whose interval ended
        self._writer = Offloaded(self._write_due, "duetime-progress")

    def report(self, claim: Claim, value: Any) -> None:
        """Check ``value`` (``ProgressError`` when it is not JSON or too big), then
        write it now or hold it for the end of the interval."""
        text = validation.progress_json(value)
        if self._store is None:
            return
        with self._lock:
            held = self._held.get(claim.token)
            if held is not None:  # written less than INTERVAL ago: hold the latest
                held[1] = text
                return
            self._held[claim.token] = [claim, None]
        self._write(claim, text)
        self._timers.call_later(INTERVAL, lambda: self._interval_ended(claim.token))

    def _interval_ended(self, token: str) -> None:
        with self._lock:
            held = self._held.get(token)
            if held is None:
                return
            if held[1] is None:  # nothing reported since the last write
                del self._held[token]
                return
            self._due.append((held[0], held[1]))
            held[1] = None
        self._writer.kick()
        self._timers.call_later(INTERVAL, lambda: self._interval_ended(token))

    def _write_due(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for claim, text in due:
            self._write(claim, text)

    def _write(self, claim: Claim, text: str) -> None:
        assert self._store is not None
        try:
            self._store.report_progress(claim, text)
        except Exception as exc:  # a hint: never the job's failure
            log.debug("progress of %s not stored: %s", claim.invocation_id, exc)
