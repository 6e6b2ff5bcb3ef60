"""The fault harness's event recorder against a real redis-server: what the scripts trim
from the capped stream before the recorder read it is counted as a gap (tests/faults/
checker.py reports it first), and nothing read in time is."""

from __future__ import annotations

import pytest
import redis

from tests.faults.recorder import Recorder

pytestmark = pytest.mark.redis

EVENT = {"kind": "claimed", "job": "j", "sched": "1", "attempt": "1", "detail": "", "at": "1"}


def stopped(url: str, key: str) -> Recorder:
    """A recorder whose thread is stopped (after its first reads, if it made any): the
    test drives the rest."""
    rec = Recorder(url, key)
    rec._stop.set()
    rec._thread.join(5)
    return rec


def test_entries_trimmed_before_the_recorder_read_them_are_a_gap(private_redis):
    r = redis.Redis.from_url(private_redis.url, decode_responses=True)
    rec = stopped(private_redis.url, "s")
    assert rec._read(None) == 0  # before the stream's first entry: nothing gone
    for _ in range(10):
        r.xadd("s", EVENT)
    assert rec._read(None) == 10 and rec.gaps == []
    last = rec._last
    for _ in range(300):  # as the scripts write: MAXLEN ~ (whole nodes trimmed)
        r.xadd("s", EVENT, maxlen=100, approximate=True)
    kept = r.xlen("s")
    assert rec._read(None) == kept and rec._read(None) == 0
    assert rec.gaps == [(last, 300 - kept)] and len(rec.events) == 10 + kept
    for _ in range(50):  # read in time: no second gap
        r.xadd("s", EVENT, maxlen=1000, approximate=True)
        assert rec._read(None) == 1
    assert len(rec.gaps) == 1
    r.close()


def test_a_stream_trimmed_before_the_recorder_began_is_no_gap(private_redis):
    r = redis.Redis.from_url(private_redis.url, decode_responses=True)
    for _ in range(300):
        r.xadd("s", EVENT, maxlen=100, approximate=True)
    rec = stopped(private_redis.url, "s")  # (its thread may have read them already)
    rec._read(None)
    assert len(rec.events) == r.xlen("s") and rec.gaps == []
    r.close()


def test_a_stream_lost_and_begun_again_is_counted_afresh(private_redis):
    r = redis.Redis.from_url(private_redis.url, decode_responses=True)
    rec = stopped(private_redis.url, "s")
    for _ in range(10):
        r.xadd("s", EVENT)
    assert rec._read(None) == 10
    r.delete("s")  # as after a restart that lost the data
    assert rec._read(None) == 0
    last = rec._last
    for _ in range(300):  # the new stream's first 200 or so trimmed before it is read
        r.xadd("s", EVENT, maxlen=100, approximate=True)
    kept = r.xlen("s")
    assert rec._read(None) == kept and rec.gaps == [(last, 300 - kept)]
    r.close()
