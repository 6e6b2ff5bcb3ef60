"""Exactly-once effects on the fence: helpers that make ``current_invocation().fence``
usable by the places a job writes to.

duetime runs an invocation again, with a higher fence, when its owner dies or stalls past
its lease; a stalled owner that wakes may still write before it learns it lost the lease.
Every helper here keeps one contract:

    A write from an invocation whose fence is not the newest seen for its job and
    occurrence is refused.

The sink (a ledger table in PostgreSQL, a ledger hash beside a Redis key) keeps, per
``(job_id, scheduled_ms)``, the highest fence that wrote. A write with a lower fence raises
``StaleFenceError`` and writes nothing; a write with an equal or higher fence is applied,
as an upsert keyed by the invocation, so the effect exists once. What each sink protects
and what it does not: docs/effects.md.

- ``workers.effects.postgres``: ``fenced_transaction``, ``record_outcome``, ``ensure_ledger``
  (psycopg 3, sync and async; the ``postgres`` extra);
- ``workers.effects.redis``: ``fenced_set``, ``fenced_hset``, ``fenced_xadd`` (redis-py,
  sync and async; the ``redis`` extra);
- ``workers.effects.http``: ``idempotency_headers`` (no dependency).

Each helper reads the running invocation (``current_invocation()``) unless given one
(``invocation=``: a ``Fence``, or any object with ``job_id``, ``scheduled_ms`` and
``fence``). This module imports neither psycopg nor redis.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from scheduler.errors import StaleFenceError
from workers.context import CURRENT

__all__ = ["Fence", "Invocation", "StaleFenceError", "fence_of"]


class Invocation(Protocol):
    """What a fenced write needs of an invocation (``InvocationContext`` has it)."""

    @property
    def job_id(self) -> str: ...

    @property
    def scheduled_ms(self) -> int: ...

    @property
    def fence(self) -> int: ...


class Fence(NamedTuple):
    """An invocation's identity and fence: what a fenced write is checked by. Build one to
    write for an invocation outside its job's thread (a test, a thread the job started:
    context variables do not follow a plain ``threading.Thread``)."""

    job_id: str
    scheduled_ms: int
    fence: int

    @property
    def invocation_id(self) -> str:
        """``<job_id>@<scheduled_ms>``: the same for every attempt and re-run of one
        occurrence (``InvocationContext.invocation_id``)."""
        return f"{self.job_id}@{self.scheduled_ms}"


def fence_of(invocation: Invocation | None = None, what: str = "a fenced write") -> Fence:
    """The ``Fence`` of ``invocation``, or of the invocation running in this context.

    Raises ``RuntimeError`` outside a job when no invocation is given (``what`` names the
    caller in the message), ``TypeError``/``ValueError`` for an invocation whose fields are
    not a job id, an integer ms and an integer fence >= 0."""
    if invocation is None:
        invocation = CURRENT.get()
        if invocation is None:
            raise RuntimeError(
                f"{what} needs the invocation it writes for: call it inside a running "
                "duetime job (it reads current_invocation()), or pass "
                "invocation=Fence(job_id, scheduled_ms, fence); a thread the job started "
                "does not see the job's context: hand it the Fence"
            )
    job_id, scheduled_ms, fence = invocation.job_id, invocation.scheduled_ms, invocation.fence
    if not isinstance(job_id, str) or not job_id:
        raise TypeError(f"an invocation's job_id must be a non-empty str, got {job_id!r}")
    for name, value in (("scheduled_ms", scheduled_ms), ("fence", fence)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"an invocation's {name} must be an int, got {value!r}")
    if fence < 0:
        raise ValueError(f"an invocation's fence must be >= 0, got {fence}")
    return Fence(job_id, scheduled_ms, fence)
