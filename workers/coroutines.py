"""Running ``async def`` jobs (issue 14): each invocation of a coroutine function is
awaited to completion on its worker thread's event loop (one per worker thread, reused;
what a job leaves running is cancelled when it ends), so a lane with N workers runs at
most N jobs at once, sync or async, and the two mix in one lane. Cancellation reaches the
coroutine: a timeout, a lease loss or ``cancel(interrupt=True)`` cancels its task (the job
sees ``CancelledError`` at its next await), and the outcome is recorded as what it was,
never as a success, even when the job swallows the ``CancelledError``.
``current_invocation()`` works inside the coroutine and in the tasks it spawns (context
variables are copied into them).

Eager start: the job's task (named after the job id) runs its first step at once, with
the loop set as the running loop and the task as the current one
(``asyncio.current_task()``, ``asyncio.timeout()`` work): on Python >= 3.12 by the Task's
own ``eager_start``; before, the task is created with its first step captured instead of
queued, and we run that step. A job that finishes without
suspending never enters the loop (most of the cost of ``run_until_complete``); one that
suspends is then run by the loop as usual.

Loop lag: blocking code inside an ``async def`` (``time.sleep``, a sync client, CPU work)
stalls its loop and cannot be pre-empted; the loop's ``lag`` says by how much. It is the
longest time the loop could not run a callback during the last job it ran: the duration
of the task's creation and eager first step, and the lateness of a probe callback that
the loop runs every ``PROBE`` seconds while the job is suspended. The runner reports it
to the engine (``Scheduler.loop_lag()``, ``stats().loop_lag``, the
``duetime_loop_lag_seconds`` metric).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from workers.context import CancelToken

_perf = time.perf_counter
_set_running_loop = asyncio.events._set_running_loop
_Task = asyncio.Task
# Python >= 3.12: ``Task(..., eager_start=True)`` runs the first step in the Task's C init,
# and a task done by then never enters asyncio's task registry (a Python ``WeakSet``):
# ~1 µs of the ~1.9 µs an async call costs beyond a sync one. Before 3.12: the capture
# below, which does the same with our ``call_soon``.
_EAGER = sys.version_info >= (3, 12)
PROBE = 0.05  # seconds between two lag probes while a job is suspended on its loop


class NotAwaitedError(TypeError):
    """A sync callable returned an awaitable: it was never run."""


class NotIteratedError(TypeError):
    """A sync callable returned a generator: its body was never run."""


def is_async(fn: object) -> bool:
    """True for a coroutine function, a partial of one, or an object whose ``__call__``
    is one."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


def call(fn: Callable[[], Any]) -> Any:
    """Call a sync job. A sync callable that returns an awaitable fails
    (``NotAwaitedError``): reporting it as a success would say it ran. (A coroutine
    function runs on its thread's loop instead: ``loops.loop.run_job``.)"""
    result = fn()
    if result is None:  # most jobs, cheaply
        return result
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise NotAwaitedError(
            "the job returned an awaitable instead of running: a sync callable (a lambda "
            "or a partial around a call?) returned it; schedule the async def itself"
        )
    if isinstance(result, types.GeneratorType):
        result.close()
        raise NotIteratedError(
            "the job returned a generator instead of running: its body runs only when "
            "iterated; schedule a function that iterates it"
        )
    return result


class _Loop(asyncio.SelectorEventLoop):
    """A worker thread's loop that runs a job's task eagerly (``run_job``)."""

    _capture = False  # the next call_soon is a new task's first step: keep it
    _step: Any = None
    _context: Any = None
    lag = 0.0  # the loop lag of the last job this loop ran (see the module docstring)
    _thread_id: int | None  # BaseEventLoop's: set while it runs (is_running())

    def __init__(self) -> None:
        super().__init__()
        self._owner = threading.get_ident()  # made on the worker thread that runs it

    def call_soon(  # type: ignore[override]
        self, callback: Any, *args: Any, context: Any = None
    ) -> Any:
        if self._capture:
            self._capture = False
            self._step, self._context = callback, context
            return None  # Task ignores the handle
        return super().call_soon(callback, *args, context=context)

    def run_job(self, fn: Callable[[], Any], token: CancelToken, name: str) -> Any:
        """Run the coroutine function ``fn`` to completion as a task named ``name``
        (eagerly started), cancelled when ``token`` is; its loop lag is then ``lag``,
        whatever the outcome."""
        if self._closed:  # type: ignore[attr-defined]  # a job closed it: run on a new one
            loop = loops.loop = _Loop()
            try:
                return loop.run_job(fn, token, name)
            finally:
                self.lag = loop.lag
        began = _perf()
        # the first step, with this loop running (``is_running()`` too: run_forever sets
        # _thread_id) and the task current (SystemExit, KeyboardInterrupt: raised here, as
        # by a loop)
        _set_running_loop(self)
        self._thread_id = self._owner
        try:
            coro = fn()
            if _EAGER:  # Python >= 3.12: the Task's C init runs it
                task: asyncio.Task[Any] = _Task(coro, loop=self, name=name, eager_start=True)  # type: ignore[call-arg]
            else:  # before: the step the Task queues, kept by our call_soon, run here
                self._capture = True  # reset by call_soon, or below if no task was made
                try:
                    task = _Task(coro, loop=self, name=name)
                finally:
                    self._capture = False
                step, context = self._step, self._context
                self._step = self._context = None
                context.run(step)
        finally:
            self._thread_id = None
            _set_running_loop(None)
            self.lag = _perf() - began  # the loop could run nothing meanwhile
        if task.done():  # finished without suspending: the loop was never entered
            try:
                return task.result()
            finally:  # what the job spawned ends with it (as asyncio.run does)
                if self._ready:  # type: ignore[attr-defined]
                    _cancel_leftovers(self)
        # the token reaches the task through `target`, emptied when the job ends: else the
        # task, its context (which holds the token) and the token would form a cycle, kept
        # (with every task asyncio lists) until a collection, and every suspending job's
        # _cancel_leftovers would walk all those tasks
        target = [task]
        token.on_cancel(lambda: _cancel_from(self, *target))
        probe: list[asyncio.TimerHandle] = []
        _probe(self, task, self.time() + PROBE, probe)
        try:
            return self.run_until_complete(task)
        finally:
            target.clear()
            probe[-1].cancel()
            probe.clear()  # each probe that ran: its handle holds its closure, which holds this
            _cancel_leftovers(self)

    def has_ready(self) -> bool:
        """True if callbacks are queued (a task the job spawned, a late cancel)."""
        return bool(self._ready)  # type: ignore[attr-defined]


class _Loops(threading.local):
    """``loops.loop``: this worker thread's event loop, made on the thread's first use and
    reused by every async job it runs (a new loop per invocation cost ~5x the CPU of a
    sync job); an attribute read, not a call (the runner reads it per async job).
    ``close_loop`` closes it when the thread ends."""

    loop: _Loop

    def __getattr__(self, name: str) -> Any:  # the first read in a thread: make its loop
        if name != "loop":
            raise AttributeError(name)
        self.loop = _Loop()
        return self.loop


loops = _Loops()


def close_loop() -> None:
    """Close the calling thread's event loop, if it made one (a worker thread that ends:
    its loop's selector and self-pipe go now, not at a garbage collection that warned
    "unclosed event loop")."""
    loop = loops.__dict__.pop("loop", None)
    if loop is not None and not loop.is_closed():
        loop.close()


def _probe(loop: _Loop, task: asyncio.Task[Any], due: float, handle: list[Any]) -> None:
    """Schedule a probe at loop time ``due`` (its handle appended to ``handle``): run, it
    records how late it ran as this thread's lag, and schedules the next one."""

    def probe() -> None:
        loop.lag = max(loop.lag, loop.time() - due)
        if not task.done():
            _probe(loop, task, due + PROBE, handle)

    handle.append(loop.call_at(due, probe))


def _cancel_leftovers(loop: _Loop) -> None:
    """Cancel the tasks a job left running and let them end; else run what is queued."""
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in leftovers:
        t.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
    elif loop.has_ready():
        loop.run_until_complete(asyncio.sleep(0))


def _cancel_from(loop: asyncio.AbstractEventLoop, *task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` from any thread (none given, or a closed loop: the job has already
    ended)."""
    try:
        for t in task:
            loop.call_soon_threadsafe(t.cancel)
    except RuntimeError:
        pass
