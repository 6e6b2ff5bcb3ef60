"""Flow control's rules, one place for both stores (docs/flow-control.md).

A job waits in a *queue* of its lane: the lane's own one (priority 0, no limit key: what
every job used before flow control), or one per (priority, limit key). Among a lane's
due jobs a higher priority starts first; within a priority, the queues with due work take
turns (one start each, in the order of their turn: the earliest due, then a queue served
goes behind the others), so one key's backlog cannot starve another key's. Limits are
declared for keys (or patterns of keys) and enforced where jobs are claimed:

* ``rate``: at most ``rate`` starts in any window of ``period`` seconds (a sliding window
  over the key's last starts; a burst of ``rate`` may start at once);
* ``concurrency``: at most that many invocations of the key run at once, fleet-wide; a slot
  comes back when an invocation ends (success, failure, release, a lost lease reaped).

A job held back by a limit stays pending, never fails and never starts early: its queue
is asked again when the limit allows (a window's oldest start ages out; a slot frees).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from scheduler import validation

#: Separates a lane from the priority and key of its flow queues (a lane name is printable
#: text, so it never holds one): "<lane>\\x1f<priority>\\x1f<key>".
SEP = "\x1f"

RATE_MAX = 10_000  # starts per window: the window keeps this many start times per key
PERIOD_MAX = 86_400.0  # a day
CONCURRENCY_MAX = 100_000


def queue_of(lane: str, priority: int, key: str | None) -> str:
    """The queue a job of ``lane`` with ``priority`` and limit ``key`` waits in."""
    if priority == 0 and key is None:
        return lane
    return f"{lane}{SEP}{priority}{SEP}{key or ''}"


def parse_queue(queue: str) -> tuple[str, int, str | None]:
    """``queue_of``'s inverse: (lane, priority, key)."""
    if SEP not in queue:
        return queue, 0, None
    lane, priority, key = queue.split(SEP, 2)
    return lane, int(priority), key or None


def lane_of(queue: str) -> str:
    return queue.partition(SEP)[0]


def scopes(key: str) -> list[str]:
    """The limit scopes that may govern ``key``, the first declared one wins: the key
    itself, then each pattern of its ``:``-separated prefixes (longest first), then
    ``*``. ``"eu:customer:42"``: ``eu:customer:42``, ``eu:customer:*``, ``eu:*``, ``*``."""
    out = [key]
    parts = key.split(":")
    for n in range(len(parts) - 1, 0, -1):
        out.append(":".join(parts[:n]) + ":*")
    out.append("*")
    return out


class Limit(NamedTuple):
    """The limits of one scope (a key, or a pattern: each matching key has its own)."""

    rate: int | None = None  # starts per period
    period: float | None = None  # seconds
    concurrency: int | None = None  # running at once

    def describe(self) -> str:
        parts = []
        if self.rate is not None and self.period is not None:
            parts.append(f"{self.rate} per {self.period:g}s")
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} at once")
        return ", ".join(parts) or "none"

    def encode(self) -> str:
        """The stored text: "<rate> <period ms> <concurrency>" (0: none)."""
        period_ms = 0 if self.period is None else round(self.period * 1000)
        return f"{self.rate or 0} {period_ms} {self.concurrency or 0}"

    @classmethod
    def decode(cls, text: str) -> Limit:
        rate, period_ms, concurrency = (int(x) for x in text.split(" "))
        return cls(rate or None, period_ms / 1000 if rate else None, concurrency or None)


def scope(value: object) -> str:
    """A limit's scope: a key, or a pattern ``<prefix>:*`` or ``*`` (each key it matches
    has a limit of its own)."""
    text = validation.name(value, "limit scope")
    if "*" in text[:-1] or (text.endswith("*") and text != "*" and not text.endswith(":*")):
        raise ValueError(
            f"limit scope {text!r}: give a key ('customer:42'), a pattern of keys that "
            "ends in ':*' ('customer:*'), or '*' for every key"
        )
    return text


def declared(scope_: object, lim: object) -> tuple[str, Limit | None]:
    """A ``set_limit`` call's arguments, checked: a scope, and a ``Limit`` or None."""
    if lim is not None and not isinstance(lim, Limit):
        raise TypeError(f"limit must be a Limit (scheduler.flow.limit(...)) or None, got {lim!r}")
    return scope(scope_), lim


def refuse_sharded(shards: int, what: str = "limits") -> None:
    """Limits (and key rules, ``what``) need one shard: a key's jobs spread over the shards
    of a sharded namespace."""
    if shards > 1:
        raise TypeError(
            f"{what} need an unsharded namespace: this one has {shards} shards, over which a "
            "key's jobs spread, so no shard could count them all; use a namespace of its own "
            "(one shard) for jobs with limits"
        )


def limit(rate: object = None, per: object = None, concurrency: object = None) -> Limit:
    """A validated ``Limit``: ``rate`` starts ``per`` seconds, and/or ``concurrency``."""
    if rate is None and concurrency is None:
        raise ValueError("a limit needs rate= (with per=) or concurrency=, or both")
    if (rate is None) != (per is None):
        raise ValueError("rate= and per= go together: rate starts per period of per seconds")
    if rate is not None:
        _count(rate, "rate", RATE_MAX)
        seconds = validation.delay(per, "per")
        if not 0.001 <= seconds <= PERIOD_MAX:
            raise ValueError(f"per must be from 0.001 s to {PERIOD_MAX:g} s (a day), got {per!r}")
        per = round(seconds, 3)
    if concurrency is not None:
        _count(concurrency, "concurrency", CONCURRENCY_MAX)
    return Limit(rate, per, concurrency)  # type: ignore[arg-type]


def _count(value: object, name: str, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number from 1 to {most}, got {value!r}")
    if not 1 <= value <= most:
        raise ValueError(f"{name} must be from 1 to {most}, got {value}")


class FlowState(NamedTuple):
    """Where a limit key stands: the scope whose limit governs it (None: no limit), that
    limit, its invocations running now, its starts within the rate's window, and whether
    the limit is full now (``full``: ``"concurrency"`` or ``"rate"``, as a claim checks them;
    None: a start is allowed) with, for a full rate, the seconds until the window allows
    the next start (``next_start_in``)."""

    key: str
    scope: str | None
    limit: Limit | None
    running: int
    recent_starts: int
    full: str | None = None
    next_start_in: float | None = None


def now_ms(t: float) -> int:
    """A clock reading in whole ms, as a store that shares a test clock with Redis sends it."""
    return round(t * 1000)


def ms_up(t: float) -> int:
    """A due time in whole ms, rounded up (as a shared store keeps it)."""
    return math.ceil(round(t * 1000, 6))


#: The rate's window is counted at claim time and the job starts a little later (a
#: replica claims up to its look-ahead, 20 ms of work, beyond its free workers; then the
#: hand-off): each claim counts for the period plus this guard, so that at the jobs' own
#: starts at most ``rate`` fall in any window of the period.
RATE_GUARD_MS = 40

#: A claim counted against a rate starts within this long (s) of the moment its replica
#: asked for it (before the store counted it), or is handed back unstarted, its start still
#: counted: so every start falls within the guard after its count. The guard's other 5 ms
#: cover what runs between that check and the job's first line.
RATE_START_WITHIN = (RATE_GUARD_MS - 5) / 1000


def window_ms(lim: Limit) -> int:
    """How long a claim counts against ``lim``'s rate (ms): its period and the guard."""
    assert lim.period is not None
    return round(lim.period * 1000) + RATE_GUARD_MS


def window_allows(starts: Sequence[int], lim: Limit, now_ms: int) -> int | None:
    """None if a start at ``now_ms`` keeps within ``lim``'s rate (``starts``: the key's
    last starts in ms, newest first), else the ms at which the oldest one counted ages out."""
    if lim.rate is None or lim.period is None or len(starts) < lim.rate:
        return None
    free_at = starts[lim.rate - 1] + window_ms(lim)
    return None if free_at <= now_ms else free_at


def recent(starts: Sequence[int], lim: Limit | None, now_ms: int) -> int:
    """How many of ``starts`` fall within ``lim``'s window ending at ``now_ms``."""
    if lim is None or lim.period is None:
        return 0
    period = window_ms(lim)
    return sum(1 for t in starts if t + period > now_ms)


def fullness(
    lim: Limit | None, running: int, starts: Sequence[int], now_ms: int
) -> tuple[str, int | None] | None:
    """Is ``lim`` full at ``now_ms`` for a key with ``running`` invocations and these last
    ``starts`` (ms, newest first)? None if a start is allowed; else why, as a claim checks
    it (concurrency first, then the rate), and for the rate the ms its next start is
    allowed at (``window_allows``)."""
    if lim is None:
        return None
    if lim.concurrency is not None and running >= lim.concurrency:
        return "concurrency", None
    if lim.rate is not None:
        at = window_allows(starts, lim, now_ms)
        if at is not None:
            return "rate", at
    return None


def state(
    key: str, limits: Mapping[str, Limit], running: int, starts: Sequence[int], now_ms: int
) -> FlowState:
    """``key``'s ``FlowState`` from what a store keeps: the declared ``limits``, its running
    count and its last starts (ms, newest first), at ``now_ms``."""
    scope = next((s for s in scopes(key) if s in limits), None)
    lim = None if scope is None else limits[scope]
    full = fullness(lim, running, starts, now_ms)
    free_at = None if full is None else full[1]
    return FlowState(
        key,
        scope,
        lim,
        running,
        recent(starts, lim, now_ms),
        None if full is None else full[0],
        None if free_at is None else (free_at - now_ms) / 1000,
    )


def decoded(stored: Mapping[object, object] | None) -> dict[str, Limit]:
    """The ``limits`` hash as declared limits by scope (one that does not parse is left out)."""
    out = {}
    for scope, text in (stored or {}).items():
        try:
            out[str(scope)] = Limit.decode(str(text))
        except ValueError:
            continue
    return out
