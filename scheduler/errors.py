"""Errors duetime raises. Each message says what happened and what to do about it."""

from __future__ import annotations


class DuetimeError(Exception):
    """Base class of every duetime error."""


class SchedulerClosedError(DuetimeError, RuntimeError):
    """The scheduler was shut down; it accepts no new work."""

    def __init__(self, what: str = "schedule") -> None:
        super().__init__(
            f"cannot {what}: this scheduler has been shut down; create a new one "
            "(pending jobs of a shared store stay there for other replicas)"
        )


class ClientClosedError(DuetimeError, RuntimeError):
    """A ``Client`` or ``AsyncClient`` was used after ``close()`` (or after its ``with``
    block): it would open a connection that nobody closes."""

    def __init__(self, kind: str = "Client") -> None:
        block = "async with" if kind.startswith("Async") else "with"
        super().__init__(
            f"this {kind} is closed: open a new one ({kind}(url)), or keep using it "
            f"inside its `{block}` block"
        )


class EventLoopMismatchError(DuetimeError, RuntimeError):
    """An ``AsyncClient`` used on an event loop other than the one it first ran on: its
    connections belong to that loop (redis.asyncio would fail with "Event loop is closed"
    or "attached to a different loop")."""

    def __init__(self) -> None:
        super().__init__(
            "this AsyncClient was first used on another event loop, which owns its "
            "connections: create an AsyncClient inside each event loop (for example in the "
            "coroutine that asyncio.run() runs), or use the sync Client"
        )


class JobNotFoundError(DuetimeError, KeyError):
    """No job with this id exists in the store."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}; list jobs to see the known ids")
        self.job_id = job_id

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TaskNotRegisteredError(DuetimeError, LookupError):
    """A task name (or a callable) that the task registry does not know."""


class PayloadError(DuetimeError, ValueError):
    """Job arguments that are not JSON or exceed the payload limit."""


class InvocationTimeout(DuetimeError, TimeoutError):
    """A job ran past its timeout (recorded as its failure; it was asked to stop)."""


class InvocationCancelled(DuetimeError):
    """A running async job was cancelled (``cancel(interrupt=True)``, or its lease was
    lost) and did not fail by itself: recorded as such, never as a success."""
