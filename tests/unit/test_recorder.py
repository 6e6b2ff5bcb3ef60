"""A replica's per-minute figures (scheduler/recorder.py ->
stores/redis/reading/console_history.py): the hooks count in memory, a flush writes them in
one pipeline, a new minute starts afresh, a failed flush is written by the next one, and
close() withdraws the announcement."""

from __future__ import annotations

import pytest

from scheduler.metrics import Metrics
from scheduler.recorder import Recorder
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.reading import console_history
from tests.fakeredis_fixtures import fakeredis_client

pytestmark = pytest.mark.fakeredis


class Wall:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_counts_and_lag_per_minute_and_the_announcement():
    store = RedisStore(fakeredis_client(), "rec")
    wall = Wall(600 * 60 + 5)
    rec = Recorder(Metrics(), store, "r1", workers=3, wall=wall)
    for lag in (0.001, 0.002, 0.100):
        rec.claimed("default", lag)
    rec.finished("default", "succeeded")
    rec.finished("default", "failed")
    rec.finished("default", "timeout")  # not charted
    rec.flush()
    rec.finished("default", "succeeded")
    rec.flush()  # adds to the same minute
    wall.t += 60
    rec.claimed("default", 0.5)
    rec.flush()
    got = console_history.minutes(store, 600, 601)
    assert (got[0]["claims"], got[0]["succeeded"], got[0]["failed"]) == (3, 2, 1)
    assert (got[0]["lag_p50"], got[0]["lag_p99"]) == (2.0, 100.0)
    assert (got[1]["claims"], got[1]["lag_p99"]) == (1, 500.0)
    (info,) = console_history.replicas(store)
    assert (info["id"], info["workers"], info["heartbeat"]) == ("r1", 3, wall.t)
    assert info["alive"] is False  # no claim wrote its live key
    assert 0 < store.redis.pttl(store.keys.minute(601)) <= console_history.KEEP * 1000
    rec.close()
    assert console_history.replicas(store) == []


def test_a_failed_flush_is_written_by_the_next(monkeypatch):
    store = RedisStore(fakeredis_client(), "rec2")
    rec = Recorder(Metrics(), store, "r1", wall=Wall(60.0))
    rec.finished("default", "succeeded")
    calls = []

    def broken(*args, **kwargs):
        calls.append(args)
        raise ConnectionError("down")

    real = console_history.record
    monkeypatch.setattr(console_history, "record", broken)
    rec.flush()
    monkeypatch.setattr(console_history, "record", real)
    rec.finished("default", "succeeded")
    rec.flush()
    assert calls and console_history.minutes(store, 1, 1)[0]["succeeded"] == 2
