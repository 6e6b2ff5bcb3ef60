"""A bounded pool of worker threads that knows how many slots are free.

The dispatcher asks ``free()`` and submits at most that many items, so an item never
waits inside the pool for long: "claimed" and "started" are moments apart.

Hand-off: one shared FIFO queue per pool. A batch is appended under one lock hold with
one wake-up; a worker that takes an item and sees more queued, and a worker asleep,
passes the wake-up on (so a batch wakes at most ``size`` threads, never one per item).
Workers take items one at a time, in order, and sleep only when the queue is empty.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("duetime.workers")


# The most claims a pool holds beyond its workers (look-ahead); the time bound (what its
# workers finish within ``lookahead`` seconds) is the one that matters for jobs longer
# than ~0.4 ms. Not 200: that halved the per-call costs of a burst of tiny jobs on its own,
# but then the successes filled their batch and flushed alone before the next claim could
# carry them (docs/decisions.md).
MAX_AHEAD = 100
# The most worker threads one pool (lane) starts. Threads start with the pool, so a typo
# such as num_workers=10**6 started threads until the process hit its limit (minutes, then
# "can't start new thread" with the started ones left behind); 4,096 start in ~3 s here.
MAX_WORKERS = 4096


class PoolFullError(RuntimeError):
    pass


class WorkerPool(Generic[T]):
    """``size`` threads running ``run(item)`` for each submitted item, in FIFO order."""

    def __init__(
        self,
        name: str,
        size: int,
        run: Callable[[T], None],
        on_free: Callable[[], None] = lambda: None,
        refill: Callable[[str], T | None] | None = None,
        *,
        lookahead: float = 0.0,
        on_idle: Callable[[], None] = lambda: None,
        on_drained: Callable[[], None] | None = None,
        on_exit: Callable[[], None] = lambda: None,
    ) -> None:
        """``on_free`` is called (outside any lock) each time a worker becomes free;
        ``refill(name)``, if given, is asked for the next item by a worker that just
        finished one, before it counts as free: during a burst, workers pull due work
        themselves instead of waking the dispatcher for every job.

        ``lookahead`` (seconds, 0 = off): ``free()`` also counts the items the workers
        will finish within that time at their recent pace (at most MAX_AHEAD), so a
        dispatcher can claim a whole batch of short jobs in one store call; an item then
        waits at most about ``lookahead`` before it starts. Long jobs get no look-ahead.
        ``on_idle`` is called by the worker that finished the pool's last item (nothing
        queued or running), before ``wait_idle`` can return (e.g. to flush batched
        acknowledgements). ``on_drained``, if given, is called instead by every worker
        that finds the queue empty after an item, before it sleeps (a store whose writes
        are cheap: nothing a worker finished waits for a timer). ``on_exit`` is called by
        each worker thread as it ends (after ``close``): what it kept per thread goes."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a pool needs at least 1 worker, got {size!r}")
        if size > MAX_WORKERS:
            raise ValueError(
                f"lane {name!r}: {size} workers is more than the {MAX_WORKERS} threads one "
                "lane may start; use fewer (each is an OS thread), or spread the work over "
                "lanes or replicas"
            )
        self.name = name
        self.size = size
        self._run = run
        self._on_free = on_free
        self._refill = refill
        self._lookahead = lookahead
        self._on_idle = on_idle
        self._on_drained = on_drained
        self._on_exit = on_exit
        self._avg_run = 0.0  # moving average of one item's run time (look-ahead only)
        self._low_water = 0  # wake the dispatcher when the queue drains to this length
        # re-entrant, as a plain Condition's (tests hold it); the hot paths hold it
        # directly (``with self._lock``: no Condition.__enter__/__exit__ frames)
        self._lock = lock = threading.RLock()
        self._cond = threading.Condition(lock)  # busy / idle changes (wait_idle)
        self._ready = threading.Condition(lock)  # workers wait here for items
        # workers waiting on _ready that no notify has woken yet: the notifier counts the
        # one it wakes, so a pop with nothing left to wake skips notify() (a burst popped
        # ~1 no-op notify per item while woken workers were still on their way)
        self._sleeping = 0
        self._queue: deque[T] = deque()
        self._busy = 0  # queued + running
        self._settling = 0
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"duetime-{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for i, t in enumerate(self._threads):
            try:
                t.start()
            except RuntimeError as exc:  # the process's thread limit (ulimit -u, pids.max)
                self.close()  # the threads already started see it and end
                raise RuntimeError(
                    f"lane {name!r}: could not start worker {i + 1} of {size} ({exc}): this "
                    "process may run fewer threads (ulimit -u, a container's pids.max); use "
                    "fewer workers"
                ) from exc

    def free(self) -> int:
        with self._lock:
            if self._closed:
                return 0
            return max(0, self.size + self._ahead() - self._busy)

    def _ahead(self) -> int:
        """How many items beyond the workers may wait here (look-ahead; under the lock)."""
        if self._lookahead <= 0 or self._avg_run <= 0:
            return 0
        ahead = min(MAX_AHEAD, int(self.size * self._lookahead / self._avg_run))
        self._low_water = ahead // 2
        return ahead

    def busy(self) -> int:
        """Items queued or running, plus workers still reporting that they are free."""
        with self._cond:
            return self._busy + self._settling

    def submit(self, item: T) -> None:
        self.submit_many((item,))

    def submit_many(self, items: Sequence[T]) -> None:
        """Queue ``items`` in order, all or none (``PoolFullError`` past the workers plus
        the look-ahead cap), with one wake-up."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"pool {self.name!r} is shut down")
            limit = self.size + (MAX_AHEAD if self._lookahead > 0 else 0)
            if self._busy + len(items) > limit:
                raise PoolFullError(f"pool {self.name!r} has no free worker")
            self._busy += len(items)
            self._queue.extend(items)
            self._wake_one()

    def _take(self) -> tuple[T, bool] | None:
        """The next item (None: closed and nothing queued), and whether the look-ahead
        queue just ran low. Sleeps only while the queue is empty."""
        with self._lock:
            while not self._queue and not self._closed:
                self._sleeping += 1
                self._ready.wait()  # its notifier (or close) took it off _sleeping
            return self._pop_locked() if self._queue else None

    def _pop_locked(self) -> tuple[T, bool]:
        item = self._queue.popleft()
        if self._queue:
            self._wake_one()  # pass the batch's wake-up on to the next worker
        return item, self._low_water > 0 and len(self._queue) == self._low_water

    def _wake_one(self) -> None:
        """Wake one sleeping worker, if one is asleep and not woken yet (under the lock)."""
        if self._sleeping:
            self._sleeping -= 1
            self._ready.notify()

    def _work(self) -> None:
        try:
            self._serve()
        finally:
            try:
                self._on_exit()
            except Exception:
                log.exception("worker %s: on_exit failed", self.name)

    def _serve(self) -> None:
        taken = self._take()
        while taken is not None:
            item, drained = taken
            if drained:
                self._on_free()  # look-ahead running low: let the dispatcher claim more
            next_item: T | None = item
            while next_item is not None:
                started = time.perf_counter() if self._lookahead > 0 else 0.0
                try:
                    self._run(next_item)
                except BaseException:  # the runner isolates job failures; a last guard
                    log.exception("worker %s: unexpected error outside a job", self.name)
                if started:
                    took = time.perf_counter() - started
                    self._avg_run = (
                        took
                        if self._avg_run <= 0
                        else (self._avg_run + (took - self._avg_run) * 0.1)
                    )
                next_item = self._next()
            taken = self._done_then_take()

    def _done_then_take(self) -> tuple[T, bool] | None:
        """The worker finished its item: count it, and take the next one in the same lock
        hold when look-ahead work is queued (a burst costs one lock hold per item)."""
        with self._lock:
            self._busy -= 1
            idle = self._busy == 0  # exactly one worker sees the pool run dry
            # with look-ahead, a worker that has queued work to take next is not news
            # for the dispatcher (it is woken when the queue runs low, see _pop_locked)
            if self._lookahead > 0 and self._queue:
                return self._pop_locked()
            self._settling += 1  # freed, but the dispatcher has not been told yet
            hook = self._on_idle if idle else None
            if self._on_drained is not None and not self._queue:
                hook = self._on_drained
        if hook is not None:  # before wait_idle() can return (it waits for settling)
            try:
                hook()
            except Exception:
                log.exception("worker %s: on_idle failed", self.name)
        self._on_free()
        with self._lock:
            self._settling -= 1
            self._cond.notify_all()
        return self._take()

    def _next(self) -> T | None:
        if self._refill is None or self._closed:
            return None
        try:
            return self._refill(self.name)
        except Exception:
            log.exception("worker %s: refill failed; the dispatcher takes over", self.name)
            return None

    def remove(self, match: Callable[[T], bool]) -> list[T]:
        """Take the queued (not yet started) items that ``match`` out of the queue and
        return them (the caller owns them); the rest keep their order."""
        with self._cond:
            taken = [item for item in self._queue if match(item)]
            if taken:
                kept = [item for item in self._queue if not match(item)]
                self._queue.clear()
                self._queue.extend(kept)
                self._busy -= len(taken)
                self._cond.notify_all()
            return taken

    def close(self) -> list[T]:
        """Stop accepting work; return the items not yet started (the caller owns them)."""
        with self._cond:
            self._closed = True
            unstarted = list(self._queue)
            self._queue.clear()
            self._busy -= len(unstarted)
            self._cond.notify_all()
            self._sleeping = 0
            self._ready.notify_all()
            return unstarted

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running. False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0 and not self._settling, timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the threads to exit (after ``close``), except the calling thread
        itself (shutdown from inside a job must not deadlock), ``timeout`` seconds in all
        (not per thread: 4 busy workers held a 30 s shutdown for 120 s). False on timeout."""
        me = threading.current_thread()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            if t is not me:
                t.join(remaining(deadline))
        return not any(t.is_alive() for t in self._threads if t is not me)


def remaining(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (``time.monotonic()``; None: no limit), at least 0."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
