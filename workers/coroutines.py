"""Running ``async def`` jobs (issue 14, first step): each invocation of a coroutine
function is awaited to completion on its worker thread's event loop (one per worker
thread, reused; what a job leaves running is cancelled when it ends), so a lane with N
workers runs at most N jobs at once, sync or async, and the two mix in one lane.
Cancellation reaches the coroutine: a timeout, a lease loss or ``cancel(interrupt=True)``
cancels its task (the job sees ``CancelledError`` at its next await), and the outcome is
recorded as what it was, never as a success, even when the job swallows the
``CancelledError``. ``current_invocation()`` works inside the coroutine and in the tasks it
spawns (context variables are copied into them).

Not yet: one loop per lane running several jobs at once, and a loop-lag metric. Blocking
code inside an ``async def`` blocks its worker thread, as a sync job would; it cannot be
pre-empted.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from workers.context import CancelToken


class NotAwaitedError(TypeError):
    """A sync callable returned an awaitable: it was never run."""


def is_async(fn: object) -> bool:
    """True for a coroutine function, a partial of one, or an object whose ``__call__``
    is one."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


def call(fn: Callable[[], Any], is_coroutine: bool, token: CancelToken) -> Any:
    """Call a job: a sync one directly; a coroutine function to completion on a new event
    loop, cancelled when ``token`` is. A sync callable that returns an awaitable fails
    (``NotAwaitedError``): reporting it as a success would say it ran."""
    if not is_coroutine:
        result = fn()
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise NotAwaitedError(
                "the job returned an awaitable instead of running: a sync callable (a lambda "
                "or a partial around a call?) returned it; schedule the async def itself"
            )
        return result
    loop = _thread_loop()
    try:
        return loop.run_until_complete(_until_cancelled(fn, token))
    finally:  # what the job spawned and left running ends with it (as asyncio.run does)
        leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in leftovers:
            t.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))


_local = threading.local()


def _thread_loop() -> asyncio.AbstractEventLoop:
    """This worker thread's event loop, made once and reused by every async job it runs
    (a new loop per invocation cost ~5x the CPU of a sync job)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
    return loop


async def _until_cancelled(fn: Callable[[], Any], token: CancelToken) -> Any:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(fn())
    token.on_cancel(lambda: _cancel_from(loop, task))
    return await task


def _cancel_from(loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` from any thread (a closed loop: the job has already ended)."""
    try:
        loop.call_soon_threadsafe(task.cancel)
    except RuntimeError:
        pass
