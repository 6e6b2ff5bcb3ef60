"""Tail a namespace's event stream into a list while a fault test runs.

The stream is capped (~10,000 events), so a long run is read as it goes. The recorder
talks to the store server directly (never through the fault proxy) and keeps trying
while the server is down; after a restart that lost the stream (ids went backwards) it
reads the new stream from its start.

A recorder starved of CPU for as long as the cap lasts misses events the scripts trimmed
before it read them; the checker would then report violations no replica committed. A
stream is trimmed from its start only, so the entries trimmed so far are its oldest
(``entries-added`` - ``length``, Redis 7's XINFO STREAM, asked by the script that reads):
more of them than the recorder has read (and than were gone when it began) means entries
were trimmed unread, and ``gaps`` counts them (the checker reports that first, as the
recorder's, not the product's).
"""

from __future__ import annotations

import threading
from typing import Any

import redis

from scheduler.stores.redis.protocol import records

# The entries trimmed from stream KEYS[1] so far (-1: no such stream; -2: a Redis before 7,
# which does not count them), and XREAD's reply after id ARGV[1], at most ARGV[2] entries.
READ = """#!lua flags=no-writes,allow-oom
local info = redis.pcall('XINFO', 'STREAM', KEYS[1])
local trimmed = -2
if type(info) ~= 'table' or info.err then
  trimmed = -1
else
  for i = 1, #info, 2 do
    if info[i] == 'entries-added' then trimmed = info[i + 1] - redis.call('XLEN', KEYS[1]) end
  end
end
return {trimmed, redis.call('XREAD', 'COUNT', ARGV[2], 'STREAMS', KEYS[1], ARGV[1])}
"""


def _id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class Recorder:
    """``events``: every event seen, as dicts (kind, job, sched, attempt, detail, at);
    ``gaps``: (the last id read before it, how many) for each stretch trimmed unread."""

    def __init__(self, url: str, stream_key: str) -> None:
        self._r = redis.Redis.from_url(
            url, decode_responses=True, socket_timeout=2, socket_connect_timeout=1
        )
        self._key = stream_key
        self._script = self._r.register_script(READ)  # EVALSHA, loaded again after a restart
        self.events: list[dict[str, Any]] = []
        self.gaps: list[tuple[str, int]] = []
        self._gone: int | None = None  # entries trimmed before the first read (None: not read)
        self._read_n = 0  # entries read from this stream
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
        """Read what follows the last entry read, and count what was trimmed unread (in
        one script: nothing is trimmed between the two; a full Redis runs it too); nothing
        new: wait up to ``block`` ms for an entry (None: not at all)."""
        trimmed, reply = self._script(keys=[self._key], args=[self._last, 2000])
        if trimmed == -1:  # no stream (yet, or no longer): the next one starts with nothing gone
            self._gone, self._read_n = 0, 0
        elif trimmed >= 0:
            if self._gone is None:
                self._gone = trimmed
            elif trimmed > self._gone + self._read_n:
                self.gaps.append((self._last, trimmed - self._gone - self._read_n))
                self._gone = trimmed - self._read_n  # counted once
        if not reply:
            top = self._r.xrevrange(self._key, count=1)
            if top and _id(top[0][0]) < _id(self._last):
                self._last, self._gone, self._read_n = "0-0", None, 0  # lost, started again
            elif block is not None:
                self._r.xread({self._key: self._last}, count=1, block=block)  # a wake-up
            return 0
        rows = reply[0][1]
        with self._lock:
            for entry_id, flat in rows:
                self.events += _events(dict(zip(flat[::2], flat[1::2], strict=True)))
                self._last = entry_id
            self._read_n += len(rows)
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
