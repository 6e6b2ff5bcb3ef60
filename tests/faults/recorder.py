"""Tail a namespace's event stream into a list while a fault test runs.

The stream is capped (~10,000 entries), so a long run is read as it goes. The recorder
talks to the store server directly (never through the fault proxy) and keeps trying
while the server is down; after a restart that lost the stream (ids went backwards) it
reads the new stream from its start.
"""

from __future__ import annotations

import threading
from typing import Any

import redis

from scheduler.stores.redis.protocol import records


def _id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class Recorder:
    """``events``: every event seen, as dicts (kind, job, sched, attempt, detail, at)."""

    def __init__(self, url: str, stream_key: str) -> None:
        self._r = redis.Redis.from_url(
            url, decode_responses=True, socket_timeout=2, socket_connect_timeout=1
        )
        self._key = stream_key
        self.events: list[dict[str, Any]] = []
        self._last = "0-0"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="recorder", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._read(block=200)
            except redis.RedisError:
                self._stop.wait(0.1)

    def _read(self, block: int | None) -> int:
        reply = self._r.xread({self._key: self._last}, count=2000, block=block)
        if not reply:
            top = self._r.xrevrange(self._key, count=1)
            if top and _id(top[0][0]) < _id(self._last):
                self._last = "0-0"  # the stream was lost and started again
            return 0
        rows = reply[0][1]
        with self._lock:
            for entry_id, f in rows:
                self.events += _events(f)
                self._last = entry_id
        return len(rows)

    def drain(self) -> list[dict[str, Any]]:
        """Read whatever is left (call once the run is over), stop, return the events."""
        self._stop.set()
        self._thread.join(5)
        for _ in range(100):
            try:
                if self._read(block=None) == 0:
                    break
            except redis.RedisError:
                break
        self._r.close()
        return list(self.events)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)


def _events(f: dict[str, str]) -> list[dict[str, Any]]:
    """One stream entry's events (through the store's one parser, records.events) as dicts
    (kind, job, sched and at in ms, attempt, detail)."""
    return [
        {
            "kind": e.kind,
            "job": e.job_id,
            "sched": None if e.scheduled is None else round(e.scheduled * 1000),
            "attempt": e.attempt,
            "detail": e.detail,
            "at": round(e.at * 1000),
        }
        for e in records.events(f)
    ]
