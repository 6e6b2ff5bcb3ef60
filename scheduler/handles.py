"""Handles: what ``enqueue`` returns, to wait for a job's result (docs/results.md).

A handle *is* the job id (a ``str`` subclass equal to it: code that stores, compares,
formats or serialises the id keeps working; pickling it gives the plain id) with
``result(timeout=)`` and ``progress()``. ``JobHandle`` blocks; ``AsyncJobHandle`` is
awaitable (``await handle`` is ``await handle.result()``).

Waiting never polls: ``result()`` registers with the store for the job's outcome, then
reads the stored outcome once (it may have ended already), then sleeps until the store
delivers the end (in process: the store's commit, under its lock; Redis: the commit
script publishes on the namespace's ``results`` channel, only for a job someone waits
for, and one subscriber per client process hands it to the handles). A registration
lasts ``HOLD`` seconds at most: a handle that waits longer registers and reads again
then (once an hour).

A one-off job's handle waits for its one invocation (through its retries); a recurring
job's names one invocation, by its scheduled instant (``handle.at(scheduled)``, or
``Client.handle(job_id, invocation=...)``), or, without one, waits for the next
invocation that ends.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from scheduler.errors import ClientClosedError, JobFailed, JobNotFoundError, ResultTimeoutError
from scheduler.model import JobInfo, Outcome
from scheduler.validation import MAX_EPOCH

HOLD = 3600.0  # seconds a registration lasts; a longer wait registers (and reads) again
GRACE = 5.0  # seconds a shared store keeps a registration past the wait's own end

Watch = Callable[..., Any]  # stores/base.py Outcomes.watch (or its async twin)
_TYPE = re.compile(r"^([A-Za-z_][\w.]*): ")
_H = TypeVar("_H", bound="_Handle")


def scheduled_ms(invocation: float | int | str | None, job_id: str) -> int | None:
    """An invocation named by its scheduled instant (seconds on the store's clock, as
    ``Claim.scheduled`` and ``JobInfo.next_run``) or by its id ``"<job>@<ms>"``
    (``current_invocation().invocation_id``), as ms; None: none named."""
    if invocation is None:
        return None
    if isinstance(invocation, str):
        job, _, ms = invocation.rpartition("@")
        if job != job_id or not ms.isdigit() or int(ms) > MAX_EPOCH * 1000:
            raise ValueError(
                f"invocation {invocation!r} is not an invocation id of job {job_id!r} "
                f"('{job_id}@<scheduled ms>')"
            )
        return int(ms)
    if isinstance(invocation, bool) or not isinstance(invocation, int | float):
        raise TypeError(f"invocation must be seconds or an invocation id, got {invocation!r}")
    if not 0 <= invocation <= MAX_EPOCH:  # NaN too
        hint = (
            " (that looks like milliseconds: give seconds, or the id '<job>@<ms>')"
            if 0 <= invocation / 1000 <= MAX_EPOCH
            else ""
        )
        raise ValueError(
            f"invocation must be a scheduled instant in epoch seconds from 0 to "
            f"{MAX_EPOCH:.0f} (the year 9999), got {invocation!r}{hint}"
        )
    return round(invocation * 1000)


def value_of(outcome: Outcome, job_id: str, ms: int | None) -> Any:
    """The result of an outcome, or ``JobFailed`` saying how it ended."""
    if outcome.state == "succeeded":
        return outcome.value
    if outcome.state == "closed":  # stores/redis/results.py CLOSED
        raise ClientClosedError("Client")
    at = outcome.scheduled_ms if outcome.scheduled_ms is not None else ms
    invocation = f"{job_id}@{at}" if at is not None else ""  # "": a one-off's record
    m = _TYPE.match(outcome.error)
    kind, message = (m.group(1), outcome.error[m.end() :]) if m else ("", outcome.error)
    raise JobFailed(job_id, invocation, outcome.state, kind, message)


def _timed_out(job_id: str, ms: int | None, timeout: float | None) -> ResultTimeoutError:
    which = f"invocation {job_id}@{ms}" if ms is not None else f"job {job_id!r}"
    return ResultTimeoutError(
        f"{which} did not end within {timeout:g}s (it may still be pending or running: "
        "call result() again to keep waiting, or Client.get() to see where it is)"
    )


class _Handle(str):
    _watch: Watch
    _get: Callable[[str], Any]
    _ms: int | None

    def __new__(
        cls: type[_H], job_id: str, watch: Watch, get: Callable[[str], Any], invocation: Any = None
    ) -> _H:
        h = super().__new__(cls, job_id)
        h._watch, h._get, h._ms = watch, get, scheduled_ms(invocation, job_id)
        return h

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (str, (str(self),))  # pickled, copied: the plain id

    def __repr__(self) -> str:
        at = "" if self._ms is None else f", invocation='{self}@{self._ms}'"
        return f"{type(self).__name__}({str(self)!r}{at})"

    @property
    def job_id(self) -> str:
        return str(self)

    @property
    def invocation(self) -> int | None:
        """The scheduled instant (ms) of the invocation it names; None: the one-off's
        run, or a recurring job's next run to end."""
        return self._ms

    def at(self: _H, invocation: float | int | str) -> _H:
        """A handle of this job's invocation scheduled at ``invocation`` (seconds on the
        store's clock, or an invocation id ``"<job>@<ms>"``)."""
        return type(self)(str(self), self._watch, self._get, invocation)

    def _progress_of(self, info: JobInfo | None) -> Any:
        if info is None:
            raise JobNotFoundError(str(self))
        p = info.progress
        if p is None or (self._ms is not None and p.scheduled_ms != self._ms):
            return None
        return p.value


class JobHandle(_Handle):
    """A job id that can wait for its result (``Client.enqueue``, ``Client.handle``)."""

    def result(self, timeout: float | None = None) -> Any:
        """Block until the invocation ends; its return value (as JSON decodes it), or
        ``JobFailed`` (failed, timed_out, interrupted, abandoned, cancelled: its
        ``error_type`` and ``message``), or ``ResultTimeoutError`` after ``timeout``
        seconds (None: no limit). ``JobNotFoundError``: no such job (or it finished more
        than the retention ago)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            hold = HOLD if left is None else min(left, HOLD)
            got: list[Outcome] = []
            done = threading.Event()

            def deliver(o: Outcome, got: list[Outcome] = got, done: threading.Event = done) -> None:
                got.append(o)
                done.set()

            known, stop = self._watch(str(self), self._ms, deliver, hold + GRACE)
            try:
                if known is None and done.wait(hold):
                    known = got[0]
            finally:
                stop()
            if known is not None:
                return value_of(known, str(self), self._ms)
            if left is not None and left <= hold:
                raise _timed_out(str(self), self._ms, timeout)

    def progress(self) -> Any:
        """What the invocation last reported with ``current_invocation().progress()``
        (None: nothing yet; a recurring job's handle without an invocation: its latest
        run's)."""
        return self._progress_of(self._get(str(self)))


class AsyncJobHandle(_Handle):
    """``JobHandle`` for asyncio (``AsyncClient.enqueue``): ``await handle`` waits for
    the result. ``watch`` and ``get`` are coroutine functions here."""

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    async def result(self, timeout: float | None = None) -> Any:
        """As ``JobHandle.result``, awaited; the wait is a future the store's delivery
        sets (no thread, no polling)."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while True:
            left = None if end is None else max(0.0, end - loop.time())
            hold = HOLD if left is None else min(left, HOLD)
            fut: asyncio.Future[Outcome] = loop.create_future()

            def deliver(o: Outcome, fut: asyncio.Future[Outcome] = fut) -> None:
                loop.call_soon_threadsafe(_settle, fut, o)

            known, stop = await self._watch(str(self), self._ms, deliver, hold + GRACE)
            try:
                if known is None:
                    known = await asyncio.wait_for(asyncio.shield(fut), hold)
            except asyncio.TimeoutError:  # noqa: UP041 - not TimeoutError before 3.11
                known = None
            finally:
                stop()
            if known is not None:
                return value_of(known, str(self), self._ms)
            if left is not None and left <= hold:
                raise _timed_out(str(self), self._ms, timeout)

    async def progress(self) -> Any:
        """As ``JobHandle.progress``, awaited."""
        return self._progress_of(await self._get(str(self)))


def _settle(fut: asyncio.Future[Outcome], o: Outcome) -> None:
    if not fut.done():
        fut.set_result(o)


def threaded_watch(watch: Watch) -> Callable[..., Awaitable[Any]]:
    """An async ``watch`` from a sync one (a ``Store`` object's, run in a worker thread:
    a shared store's registration is a round trip)."""

    async def awatch(*args: Any) -> Any:
        return await asyncio.to_thread(watch, *args)

    return awatch
