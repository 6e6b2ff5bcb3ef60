"""Whether a job's callable is a coroutine function, remembered per callable object.

``coroutines.is_async`` unwraps partials and inspects code flags (~0.4 µs); a burst runs
the same callable thousands of times (a registered task's call is built once per
definition: ``scheduler.tasks.resolve``; an in-process job is its own function). The
answer is kept per object behind a weak reference, so the cache holds no callable alive
(nor what its closure captured), and an id reused by a new object after the old one died
is not mistaken for it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from workers import coroutines

ASYNC_FLAGS = 1024  # callables remembered (then the cache starts afresh)


class AsyncFlags:
    """``is_async(fn)``, remembered per live callable object."""

    def __init__(self, limit: int = ASYNC_FLAGS) -> None:
        self._limit = limit
        # id(fn) -> (weak reference to fn, flag); read and written by every worker thread
        # without a lock: each dict operation is atomic under the GIL, and a race only
        # computes the same flag twice
        self._flags: dict[int, tuple[weakref.ref[Any], bool]] = {}

    def __call__(self, fn: Callable[[], Any]) -> bool:
        entry = self._flags.get(id(fn))
        if entry is not None and entry[0]() is fn:
            return entry[1]
        flag = coroutines.is_async(fn)
        try:
            ref = weakref.ref(fn)
        except TypeError:  # not weakly referenceable: asked every time
            return flag
        if len(self._flags) >= self._limit:
            self._flags.clear()
        self._flags[id(fn)] = (ref, flag)
        return flag
