"""What a running job can learn about itself: ``current_invocation()``."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

# The reason of a token cancelled by an operator's interrupt (``cancel(interrupt=True)``,
# here or, through the store, on another replica): the runner records such an end as
# interrupted, neither a failure nor a success, for sync and async jobs alike (a sync job
# that returns after its token was so cancelled is interrupted too).
INTERRUPTED = "cancelled"


class CancelToken:
    """Cooperative cancellation: set once, with a reason; jobs poll ``cancelled()``.
    The event behind ``wait`` is created only if someone waits (most jobs never do)."""

    __slots__ = ("reason", "_event", "_lock", "_callbacks")

    def __init__(self) -> None:
        self.reason: str | None = None
        self._event: threading.Event | None = None
        self._lock = _token_lock
        self._callbacks: list[Callable[[], None]] | None = None

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            event, callbacks = self._event, self._callbacks
        if event is not None:
            event.set()
        for callback in callbacks or ():
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the cancelling thread) when the token is cancelled; at
        once if it already is (an async job's task is cancelled this way)."""
        with self._lock:
            if self.reason is None:
                self._callbacks = [*(self._callbacks or ()), callback]
                return
        callback()

    def cancelled(self) -> bool:
        return self.reason is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled (True) or ``timeout`` real seconds pass (False)."""
        with self._lock:
            if self.reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)


_token_lock = threading.Lock()  # guards the rare lazy creation and setting of events


class InvocationContext(NamedTuple):
    """The invocation a job is running for. ``fence`` grows with every claim: pass it to a
    resource that can reject writes from an owner that has since lost the invocation;
    ``invocation_id`` is stable across attempts and makes a good idempotency key."""

    job_id: str
    scheduled_ms: int
    attempt: int
    fence: int
    lane: str
    token: CancelToken
    claim: Any = None  # its Claim (the store's token authorises its progress reports)
    reports: Any = None  # the engine's ProgressReports (workers/progress.py)

    @property
    def invocation_id(self) -> str:
        return f"{self.job_id}@{self.scheduled_ms}"

    def cancelled(self) -> bool:
        """True once the job should stop: timeout, lease lost, or an operator's
        ``cancel(interrupt=True)`` (``cancel_reason`` says which). A job that returns after
        an interrupt is recorded ``interrupted``, not a success."""
        return self.token.cancelled()

    @property
    def cancel_reason(self) -> str | None:
        return self.token.reason

    def progress(self, value: Any) -> None:
        """Report how far the job has come: ``value`` is JSON (a number, a short text, a
        small dict; at most 4 KiB as JSON, else ``ProgressError``, nothing stored). It is
        stored with the job, where ``duetime show``, the console and a handle's
        ``progress()`` read it; at most one write per second per invocation (the latest
        value of a second is written when it ends: docs/results.md)."""
        if self.reports is not None:
            self.reports.report(self.claim, value)


def log_fields(of: Any, event: str, replica: str) -> dict[str, Any]:
    """The structured fields of a log line (scheduler/log.py) about invocation ``of``: a
    ``Claim`` or its ``InvocationContext`` (both name its job, invocation, attempt, lane),
    as the runner and a process lane's worker log it."""
    return {
        "event": event,
        "job_id": of.job_id,
        "invocation": of.invocation_id,
        "attempt": of.attempt,
        "lane": of.lane,
        "replica": replica,
    }


#: The invocation running in this context: set around each job by the runner
#: (workers/runner.py), read by ``current_invocation``.
CURRENT: contextvars.ContextVar[InvocationContext | None] = contextvars.ContextVar(
    "duetime_invocation", default=None
)


def current_invocation() -> InvocationContext:
    """The context of the invocation running on this thread. Raises ``RuntimeError``
    outside a job."""
    ctx = CURRENT.get()
    if ctx is None:
        raise RuntimeError("current_invocation() is only available inside a running job")
    return ctx
