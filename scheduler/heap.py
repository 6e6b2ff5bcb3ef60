"""The due heap: entries ordered by (due, seq), validated lazily.

An entry is *stale* when the pending invocation it points to was cancelled, replaced,
paused or already claimed. Nothing searches the heap for stale entries: the owner keeps
``pending`` keyed by ``seq``, and an entry popped whose ``seq`` is no longer pending is
dropped in O(1). When stale entries outnumber live ones the heap is rebuilt (O(n),
amortised O(1) per cancel).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple


class DueEntry(NamedTuple):
    due: float
    seq: int  # global submission order: FIFO among equal due times, and identity
    job_id: str
    generation: int  # the job definition this entry belongs to


class DueHeap:
    """A min-heap of DueEntry with lazy deletion. Not thread-safe: the store's lock guards it."""

    def __init__(self) -> None:
        self._heap: list[DueEntry] = []
        self._stale = 0

    def __len__(self) -> int:
        return len(self._heap) - self._stale

    def push(self, entry: DueEntry) -> None:
        heapq.heappush(self._heap, entry)

    def mark_stale(self, count: int = 1) -> None:
        """Tell the heap that ``count`` of its entries became stale (for compaction)."""
        self._stale += count

    def peek(self, is_live: Callable[[DueEntry], bool]) -> DueEntry | None:
        """The earliest live entry, dropping stale ones found on top."""
        heap = self._heap
        while heap:
            top = heap[0]
            if is_live(top):
                return top
            heapq.heappop(heap)
            self._stale = max(0, self._stale - 1)
        return None

    def pop(self) -> DueEntry:
        return heapq.heappop(self._heap)

    def compact(self, is_live: Callable[[DueEntry], bool]) -> None:
        """Rebuild without stale entries when they are more than half of the heap."""
        if self._stale > 64 and self._stale * 2 > len(self._heap):
            self._heap = [e for e in self._heap if is_live(e)]
            heapq.heapify(self._heap)
            self._stale = 0


def earliest(
    heaps: Mapping[str, DueHeap], lanes: Iterable[str], is_live: Callable[[DueEntry], bool]
) -> tuple[str, DueEntry | None]:
    """Among ``lanes``, the one whose live head is earliest by (due, seq), and that head."""
    best_lane, best = "", None
    for lane in lanes:
        heap = heaps.get(lane)
        top = heap.peek(is_live) if heap is not None else None
        if top is not None and (best is None or (top.due, top.seq) < (best.due, best.seq)):
            best_lane, best = lane, top
    return best_lane, best
