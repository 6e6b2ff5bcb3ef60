"""MemoryStore's flow control: priorities, turns between keys, and limits, kept as
``lua/include/flow.lua``, ``limits.lua`` and ``turns.lua`` keep them in Redis (the rules:
``scheduler/flow.py``; what users get: docs/flow-control.md).

The book knows queues by name and asks the store for what is in them (``head``: the due
time of a queue's first live entry; ``take``: claim at most one invocation from it). It
counts time as Redis does, in whole ms (``now``: the store's clock in ms; a due time
rounded up, as a shared store keeps it), so both stores decide alike on one fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler import flow
from scheduler.flow import (
    RATE_START_WITHIN,
    FlowState,
    Limit,
    ms_up,
    parse_queue,
    queue_of,
    recent,
    scopes,
    window_allows,
)
from scheduler.limit_usage import KeySeen
from scheduler.model import JobSpec

RECHECK_MS = 1000  # a keyed queue whose due head waits is asked again within (include/ask.lua)
WAITS = math.inf  # the turn of a queue at its key's concurrency: it comes back with a slot

Head = Callable[[str], "int | None"]  # a queue's first due time, in ms rounded up
Take = Callable[[str, int], int]  # claim up to n invocations from a queue: how many?


@dataclass
class FlowBook:
    levels: dict[str, set[int]] = field(default_factory=dict)  # lane -> flow priorities
    # (lane, priority) -> limit key ("": the level's queue without a key) -> its turn (ms)
    turns: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    limits: dict[str, Limit] = field(default_factory=dict)  # scope -> limit
    running: dict[str, int] = field(default_factory=dict)  # key -> invocations running
    windows: dict[str, list[int]] = field(default_factory=dict)  # key -> starts (ms), newest first
    waiting: dict[str, set[str]] = field(default_factory=dict)  # key -> queues at its cap

    def pushed(self, queue: str, due: float) -> None:
        """A pending invocation entered ``queue``, due at ``due`` (seconds)."""
        lane, priority, key = parse_queue(queue)
        if queue == lane:
            return
        self.levels.setdefault(lane, set()).add(priority)
        if key is not None:
            self._bring_forward(lane, priority, key, ms_up(due))

    def _bring_forward(self, lane: str, priority: int, key: str, turn: int) -> None:
        turns = self.turns.setdefault((lane, priority), {})
        if key not in turns or turn < turns[key]:
            turns[key] = turn

    def flows(self, lane: str) -> bool:
        """Does ``lane`` have queues other than its own (priorities, keys)?"""
        return bool(self.levels.get(lane))

    # ---- limits ------------------------------------------------------------------------

    def governing(self, key: str) -> str | None:
        """The scope whose limit governs ``key`` (its own, then its patterns), or None."""
        return next((s for s in scopes(key) if s in self.limits), None)

    def limit_of(self, key: str) -> Limit | None:
        scope = self.governing(key)
        return None if scope is None else self.limits[scope]

    def state(self, key: str, now: int) -> FlowState:
        return flow.state(
            key, self.limits, self.running.get(key, 0), self.windows.get(key, []), now
        )

    def seen(self, due: dict[str, list[int]]) -> list[KeySeen]:
        """What the readout of limits reads of each key with due (``due``: key -> due
        times in ms of its invocations due now) or running work (``limit_usage``)."""
        return [
            KeySeen(
                key,
                self.running.get(key, 0),
                tuple(self.windows.get(key, ())),
                len(due.get(key, ())),
                min(due[key]) if due.get(key) else None,
            )
            for key in sorted(set(due) | set(self.running))
        ]

    def set_limit(self, scope: str, lim: Limit | None, now: int) -> bool:
        """As lua/limit.lua: declared (None: removed); the queues of keys it may govern
        that wait get their turn now. True if it changed."""
        if self.limits.get(scope) == lim:
            return False
        if lim is None:
            del self.limits[scope]
        else:
            self.limits[scope] = lim
        prefix = scope[:-1] if scope.endswith("*") else None
        for turns in self.turns.values():
            for key, turn in turns.items():
                governs = key == scope or (prefix is not None and key.startswith(prefix))
                if key and turn > now and governs:
                    turns[key] = now
        return True

    def room(self, key: str, now: int, most: int) -> tuple[float, tuple[str, float] | None]:
        """How many invocations of ``key`` may start at ``now``, up to ``most`` where a
        rate limits it (inf: no limit); 0 and why: ("concurrency", WAITS), or ("rate", the
        ms one may). lua's flow_room."""
        lim = self.limit_of(key)
        room: float = math.inf
        if lim is None:
            return room, None
        if lim.concurrency is not None:
            room = lim.concurrency - self.running.get(key, 0)
            if room <= 0:
                return 0, ("concurrency", WAITS)
        if lim.rate is not None:
            starts = self.windows.get(key, [])
            counted = recent(starts[: lim.rate], lim, now)
            if counted >= lim.rate:
                at = window_allows(starts, lim, now)
                assert at is not None
                return 0, ("rate", at)
            room = min(room, lim.rate - counted, most)
        return room, None

    def started(self, spec: JobSpec, now: int) -> float | None:
        """An invocation of ``spec`` was claimed at ``now``: its key counts it. Returns
        the claim's ``start_within`` (``RATE_START_WITHIN`` where a rate counted it)."""
        key = spec.limit_key
        if key is None:
            return None
        self.running[key] = self.running.get(key, 0) + 1
        lim = self.limit_of(key)
        if lim is None or lim.rate is None:
            return None
        starts = self.windows.setdefault(key, [])
        starts.insert(0, now)
        del starts[lim.rate :]
        return RATE_START_WITHIN

    def ended(self, spec: JobSpec, now: int) -> bool:
        """An invocation of ``spec`` (as claimed) ended: its key's slot is free, and the
        queues that waited for one (and its own) get a turn now. True if any waited."""
        key = spec.limit_key
        if key is None:
            return False
        left = self.running.get(key, 0) - 1
        if left > 0:
            self.running[key] = left
        else:
            self.running.pop(key, None)
        waited = self.waiting.pop(key, set())
        for queue in waited | {queue_of(spec.lane, spec.priority, key)}:
            lane, priority, _ = parse_queue(queue)
            self._bring_forward(lane, priority, key, now)
        return bool(waited)

    # ---- a claim -----------------------------------------------------------------------

    def claim_lane(self, lane: str, cap: int, now: int, head: Head, take: Take) -> int:
        """Claim up to ``cap`` from ``lane``'s queues: priorities high to low, turns
        within each. Returns the capacity left."""
        for priority in sorted(self.levels.get(lane, set()) | {0}, reverse=True):
            if cap == 0:
                break
            cap = self._claim_level(lane, priority, cap, now, head, take)
        return cap

    def _candidates(
        self, lane: str, priority: int, cap: int, now: int, head: Head
    ) -> list[tuple[float, str]]:
        """The queues of ``priority`` whose turn has come, in turn order (then key; the
        queue without a key first)."""
        turns = self.turns.setdefault((lane, priority), {})
        cands: list[tuple[float, str]] = []
        first = head(queue_of(lane, priority, None))
        if first is not None and first <= now:
            turn = max(first, turns.get("", first))
            if turn <= now:
                cands.append((turn, ""))
        # keyed: the first ``cap`` whose head is due (of at most cap * 4 + 16 turns read);
        # one met empty loses its turn, one not due yet gets its head's
        read = sorted((t, k) for k, t in turns.items() if t <= now)[: cap * 4 + 16]
        for t, k in read:
            if not k or len(cands) - (1 if cands and not cands[0][1] else 0) >= cap:
                continue
            h = head(queue_of(lane, priority, k))
            if h is None:
                del turns[k]
            elif h > now:
                turns[k] = h
            else:
                cands.append((t, k))
        return sorted(cands)

    def _claim_level(
        self, lane: str, priority: int, cap: int, now: int, head: Head, take: Take
    ) -> int:
        cands = self._candidates(lane, priority, cap, now, head)
        served: set[str] = set()
        done: set[str] = set()
        blocked: dict[str, tuple[str, float]] = {}
        active = len(cands)  # not done; one alone takes what its room allows at once
        while cap > 0 and active > 0:
            for _, key in cands:
                if cap == 0:
                    break
                if key in done:
                    continue
                most = cap if active == 1 else 1
                room, why = self.room(key, now, most) if key else (math.inf, None)
                want = min(cap, room) if active == 1 else 1
                got = take(queue_of(lane, priority, key or None), int(want)) if room > 0 else 0
                cap -= got
                if got:
                    served.add(key)
                if why is not None:
                    blocked[key] = why
                if room <= 0 or got < want:
                    done.add(key)
                    active -= 1
        self._next_turns(lane, priority, now, head, cands, served, blocked)
        return cap

    def _next_turns(
        self,
        lane: str,
        priority: int,
        now: int,
        head: Head,
        cands: list[tuple[float, str]],
        served: set[str],
        blocked: dict[str, tuple[str, float]],
    ) -> None:
        """After a claim's rounds: each candidate's next turn (lua/include/turns.lua)."""
        turns = self.turns.setdefault((lane, priority), {})
        for _, key in cands:
            queue = queue_of(lane, priority, key or None)
            if key in blocked and head(queue) is None:  # empty: a push gives it a turn
                turns.pop(key, None)
            elif key in blocked:
                turns[key] = blocked[key][1]  # a rate's next start, or WAITS for a slot
                if blocked[key][1] == WAITS:
                    self.waiting.setdefault(key, set()).add(queue)
            elif key in served:  # behind the others; gone if it is empty
                h = head(queue)
                if h is None:
                    turns.pop(key, None)
                else:  # (the queue without a key is found by its head: its turn only orders)
                    turns[key] = now if not key else max(h, now)
            else:  # empty, or not yet due, or what is due waits for a run to end
                h = head(queue)
                if h is not None and key:
                    turns[key] = h if h > now else now + RECHECK_MS
                else:  # the queue without a key is found by its head: its turn only orders
                    turns.pop(key, None)

    def next_turn(self, lane: str) -> float | None:
        """The earliest turn (ms) of ``lane``'s keyed queues that may come (their heads:
        the store's), but for a key at its concurrency (include/ask.lua's rule)."""
        best = None
        for priority in self.levels.get(lane, ()):
            for key, turn in self.turns.get((lane, priority), {}).items():
                if key and turn != WAITS and (best is None or turn < best) and not self._full(key):
                    best = turn
        return best

    def _full(self, key: str) -> bool:
        """Is ``key`` at its concurrency (a slot's end gives its queues their turn)?"""
        lim = self.limit_of(key)
        return bool(lim and lim.concurrency and self.running.get(key, 0) >= lim.concurrency)

    def queues(self, lane: str) -> list[str]:
        """``lane``'s queues without a key, one per priority (its own included)."""
        return [queue_of(lane, p, None) for p in sorted(self.levels.get(lane, set()) | {0})]
