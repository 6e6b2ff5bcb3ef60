"""Pure schedule arithmetic: fixed-rate grid points and the misfire plan.

No clocks, no state: the stores call these with their own "now", and hypothesis tests
compare them with a brute-force model (tests/unit/test_schedules.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.model import Misfire

DEFAULT_GRACE_CAP = 60.0


def occurrence(anchor: float, interval: float, k: int) -> float:
    """Due time of occurrence k: anchor + k * interval, computed from k (never by adding
    intervals up), so there is no drift however many runs there have been."""
    return anchor + k * interval


def last_index_at_or_before(anchor: float, interval: float, now: float) -> int:
    """The largest k with occurrence(k) <= now (-1 if the anchor is still ahead)."""
    if now < anchor:
        return -1
    k = math.floor((now - anchor) / interval)
    # float division may land one off either way; settle it with the exact comparison
    while occurrence(anchor, interval, k) > now:
        k -= 1
    while occurrence(anchor, interval, k + 1) <= now:
        k += 1
    return k


def first_index_at_or_after(anchor: float, interval: float, t: float) -> int:
    """The smallest k >= 0 with occurrence(k) >= t."""
    k = max(0, math.ceil((t - anchor) / interval))
    while k > 0 and occurrence(anchor, interval, k - 1) >= t:
        k -= 1
    while occurrence(anchor, interval, k) < t:
        k += 1
    return k


def grace_for(interval: float, grace: float | None) -> float:
    """Default misfire grace: one interval, at most 60 s."""
    return min(interval, DEFAULT_GRACE_CAP) if grace is None else grace


@dataclass(frozen=True)
class Plan:
    """What to do now with a due recurring occurrence k.

    ``run``: the index to run now (or None); ``skipped``: an inclusive index range recorded
    as skipped with ``reason``; ``next_k``: the next occurrence to keep pending."""

    run: int | None
    next_k: int
    skipped: tuple[int, int] | None = None
    reason: str = ""


def plan(
    anchor: float, interval: float, k: int, now: float, policy: Misfire, grace: float
) -> Plan:
    """Decide about occurrence k, which is due (occurrence(k) <= now).

    An occurrence is *missed* when now - due > grace. ``catch_up`` runs k and keeps k+1
    pending (which is due at once if it was missed too: one run per claim, bounded work).
    ``skip`` records the missed ones and runs the first on-time one, if any; otherwise the
    next run is the first grid point after now. ``run_once`` runs the latest due occurrence
    in place of all the missed ones."""
    if policy is Misfire.CATCH_UP:
        return Plan(run=k, next_k=k + 1)
    on_time = first_index_at_or_after(anchor, interval, now - grace)
    if k >= on_time:
        return Plan(run=k, next_k=k + 1)
    m = last_index_at_or_before(anchor, interval, now)
    if policy is Misfire.RUN_ONCE:
        skipped = (k, m - 1) if m > k else None
        return Plan(run=m, next_k=m + 1, skipped=skipped, reason="coalesced")
    if on_time <= m:
        return Plan(run=on_time, next_k=on_time + 1, skipped=(k, on_time - 1), reason="misfire")
    return Plan(run=None, next_k=m + 1, skipped=(k, m), reason="misfire")
