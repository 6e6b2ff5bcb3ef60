"""What waits on each limit, and what holds a job back: one semantics for both stores
(docs/flow-control.md, "Watching limits").

A store reads, for each limit key with due or running work, what it keeps anyway
(``KeySeen``: its running count, its last starts, how many of its invocations are due
and not claimed, the due time of the oldest of them); ``usage`` turns those into one
``ScopeUsage`` per declared scope, and ``hold`` says whether a job's wait is the limit's.

**Attribution** (docs/decisions.md): a due job's wait is attributed to its limit when
its key's limit is full at the time of reading (``flow.fullness``: as a claim would judge
it then, concurrency first, then the rate). A due job of a key whose limit has room
waits for something else (a free worker, a replica, its turn), and is counted as waiting
but not as held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from scheduler import flow, timeinput
from scheduler.errors import JobNotFoundError
from scheduler.flow import FlowState, Limit, ms_up
from scheduler.model import JobInfo

TOP_KEYS = 10  # keys listed per scope (those with the most due jobs waiting)


class KeySeen(NamedTuple):
    """What a store read of one limit key: its invocations running, its last starts (ms,
    newest first), its due invocations not yet claimed, and the oldest one's due time (ms)."""

    key: str
    running: int
    starts: tuple[int, ...]
    waiting: int
    oldest_due: int | None


class KeyUsage(NamedTuple):
    """One key under a limit now: running, starts within the rate's window, due jobs
    waiting and how long the oldest has waited (seconds), and whether its limit is full
    (``full``: ``"concurrency"`` or ``"rate"``; ``next_start_in``: seconds, a full rate)."""

    key: str
    running: int
    window_starts: int
    waiting: int
    oldest_wait: float | None
    full: str | None
    next_start_in: float | None


class ScopeUsage(NamedTuple):
    """One declared scope now, over the keys it governs that have due or running work:
    how many there are (``keys``) and how many are at their limit (``full_keys``); their
    invocations running, starts within the window, due jobs waiting, of those the ones
    ``held`` (their key's limit is full: the wait is the limit's), the oldest wait
    (seconds; None: nothing waits); and the ``top`` keys by due jobs waiting. A pattern
    (``customer:*``) limits each key on its own: these figures add its keys up."""

    scope: str
    limit: Limit
    keys: int
    full_keys: int
    running: int
    window_starts: int
    waiting: int
    held: int
    oldest_wait: float | None
    top: tuple[KeyUsage, ...]


def usage(
    limits: Mapping[str, Limit], seen: Iterable[KeySeen], now_ms: int, top: int = TOP_KEYS
) -> list[ScopeUsage]:
    """One ``ScopeUsage`` per declared scope (by scope), from what was read of the keys
    at ``now_ms``; a key no declared scope governs is left out."""
    by_scope: dict[str, list[KeyUsage]] = {s: [] for s in limits}
    for k in seen:
        if not (k.waiting or k.running):
            continue  # nothing due, nothing running: nothing to watch
        state = flow.state(k.key, limits, k.running, k.starts, now_ms)
        if state.scope is None:
            continue
        wait = None if k.oldest_due is None else max(0, now_ms - k.oldest_due) / 1000
        by_scope[state.scope].append(
            KeyUsage(
                k.key,
                k.running,
                state.recent_starts,
                k.waiting,
                wait,
                state.full,
                state.next_start_in,
            )
        )
    return [_scope(s, limits[s], keys, top) for s, keys in sorted(by_scope.items())]


def _scope(scope: str, lim: Limit, keys: list[KeyUsage], top: int) -> ScopeUsage:
    waits = [k.oldest_wait for k in keys if k.oldest_wait is not None]
    ranked = sorted(keys, key=lambda k: (-k.waiting, -(k.oldest_wait or 0.0), -k.running, k.key))
    return ScopeUsage(
        scope,
        lim,
        len(keys),
        sum(1 for k in keys if k.full),
        sum(k.running for k in keys),
        sum(k.window_starts for k in keys),
        sum(k.waiting for k in keys),
        sum(k.waiting for k in keys if k.full),
        max(waits) if waits else None,
        tuple(ranked[: max(0, top)]),
    )


class Hold(NamedTuple):
    """What holds a due job back now: its key's limit, full at the time of reading
    (``reason``: ``"concurrency"`` or ``"rate"``), with the key's running count and starts
    in the window, for a rate the seconds until the next start is allowed, and how long the
    job has waited since it was due (seconds)."""

    job_id: str
    key: str
    scope: str
    limit: Limit
    reason: str
    running: int
    window_starts: int
    next_start_in: float | None
    waited: float

    def describe(self) -> str:
        """``limit customer:* (rate 10 per 1s: 10 started in the window; next start allowed
        in 0.4 s)`` or ``limit tenant:42 (concurrency 2: 2 running)``."""
        lim = self.limit
        if self.reason == "concurrency":
            why = f"concurrency {lim.concurrency}: {self.running} running"
        else:
            why = f"rate {lim.rate} per {lim.period:g}s: {self.window_starts} started in the window"
            if self.next_start_in is not None:
                why += f"; next start allowed in {timeinput.span(self.next_start_in)}"
        return f"limit {self.scope} ({why})"


def hold(info: JobInfo, state: FlowState, now_ms: int) -> Hold | None:
    """The ``Hold`` of a job now: a scheduled job (pending, not running, not paused) whose
    next run is due at ``now_ms`` and whose key's limit is full (``state``: its key's,
    read at ``now_ms``); None otherwise."""
    if (
        info.state != "scheduled"
        or info.limit_key is None
        or info.limit_key != state.key
        or info.next_run is None
        or state.full is None
        or state.scope is None
        or state.limit is None
    ):
        return None
    due = ms_up(info.next_run)
    if due > now_ms:
        return None
    return Hold(
        info.job_id,
        state.key,
        state.scope,
        state.limit,
        state.full,
        state.running,
        state.recent_starts,
        state.next_start_in,
        (now_ms - due) / 1000,
    )


def figures(scopes: Iterable[ScopeUsage]) -> dict[str, dict[str, float]]:
    """The Prometheus gauges of each scope (``metrics.PrometheusMetrics``'s ``limits``
    figures): running, window starts, waiting and held jobs, full keys, oldest wait."""
    return {
        u.scope: {
            "running": u.running,
            "window_starts": u.window_starts,
            "waiting": u.waiting,
            "held": u.held,
            "full_keys": u.full_keys,
            "oldest_wait": u.oldest_wait or 0.0,
        }
        for u in scopes
    }


def held(store: Any, info: JobInfo) -> Hold | None:
    """What holds job ``info`` back now, as ``show`` and the console's job page say it: its
    key's full limit (``hold_of``), or None (no key; or deleted since it was read)."""
    if info.limit_key is None:
        return None
    try:
        return store.hold_of(info.job_id)  # type: ignore[no-any-return]
    except JobNotFoundError:
        return None
