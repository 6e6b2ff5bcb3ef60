"""What a running job can learn about itself: ``current_invocation()``."""
from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field


class CancelToken:
    """Cooperative cancellation: set once, with a reason; jobs poll ``cancelled()``."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def cancel(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled (True) or ``timeout`` real seconds pass (False)."""
        return self._event.wait(timeout)


@dataclass(frozen=True)
class InvocationContext:
    """The invocation a job is running for. ``fence`` grows with every claim: pass it to a
    resource that can reject writes from an owner that has since lost the invocation;
    ``invocation_id`` is stable across attempts and makes a good idempotency key."""

    job_id: str
    scheduled_ms: int
    attempt: int
    fence: int
    lane: str
    token: CancelToken = field(repr=False, compare=False)

    @property
    def invocation_id(self) -> str:
        return f"{self.job_id}@{self.scheduled_ms}"

    def cancelled(self) -> bool:
        """True once the job should stop: timeout, lease lost, or cancel(wait=...)."""
        return self.token.cancelled()

    @property
    def cancel_reason(self) -> str | None:
        return self.token.reason


_current: contextvars.ContextVar[InvocationContext | None] = contextvars.ContextVar(
    "duetime_invocation", default=None)


def current_invocation() -> InvocationContext:
    """The context of the invocation running on this thread. Raises ``RuntimeError``
    outside a job."""
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("current_invocation() is only available inside a running job")
    return ctx
