"""Three replica processes run calendar jobs through a real daylight-saving change
(Europe/Paris, 25 October 2026, 01:00 UTC: 03:00 CEST -> 02:00 CET), each invocation
exactly once, counted by the independent witness. The fleet and its store live
``shift`` seconds in the future (tests/integration/shifted.py), so "now" is a few
seconds before the change."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from scheduler import Client
from scheduler.model import Ambiguous, Cron
from scheduler.stores.redis import RedisStore
from tests.faults.fleet import replicas, wait_until, witness_log
from tests.integration.shifted import OffsetClock

pytestmark = [pytest.mark.redis, pytest.mark.slow]

CHANGE = dt.datetime(2026, 10, 25, 1, 0, tzinfo=dt.timezone.utc).timestamp()


def test_replicas_cross_a_dst_change_without_double_or_miss(
    redis_url, redis_ns, redis_client, tmp_path
):
    key = f"w{uuid.uuid4().hex[:8]}"
    start = CHANGE - 14  # the producer's "now": 00:59:46 UTC = 02:59:46 CEST
    shift = start - time.time()
    clock = OffsetClock(shift)
    every_2s_in_hour_2 = "*/2 * 2 * * *"  # local 02:xx:xx, which happens twice today
    with (
        replicas(
            redis_url,
            redis_ns,
            key,
            count=3,
            workers=4,
            lease=5,
            resync=1,
            log_dir=tmp_path,
            shift=shift,
        ) as fleet,
        Client(RedisStore(redis_url, redis_ns, clock=clock)) as client,
    ):
        assert wait_until(
            lambda: len(redis_client.keys(f"duetime:{{{redis_ns}}}:replica:*")) == 3, 30
        ), "replicas not up"
        t0 = clock.now()
        for policy in Ambiguous:
            client.enqueue(
                "witness.hit",
                job_id=policy.value,
                cron=Cron(every_2s_in_hour_2, "Europe/Paris", ambiguous=policy),
            )
        end = CHANGE + 12
        assert t0 < CHANGE - 4, "the fleet started too slowly to reach the change in time"
        assert wait_until(lambda: clock.now() > end + 1.5, 40)
        codes = fleet.stop()
    assert codes == [0, 0, 0]

    log = witness_log(redis_client, key)
    counts = {k.decode(): int(v) for k, v in redis_client.hgetall(f"{key}:execs").items()}
    assert counts and set(counts.values()) == {1}, "an invocation ran twice"
    first = int(t0) + 1 + (int(t0) + 1) % 2  # the first even second after enqueueing
    before = [s * 1000 for s in range(first, int(CHANGE), 2)]  # ... 00:59:58
    after = [s * 1000 for s in range(int(CHANGE), int(end) + 1, 2)]  # 01:00:00 ...
    runs = {p.value: sorted(e["sched"] for e in log if e["job"] == p.value) for p in Ambiguous}
    # the first pass of 02:xx (CEST) precedes the change; the second (CET) follows it
    assert runs["first"] == before  # the repeated hour does not rerun
    assert runs["last"] == after  # only the second pass
    assert runs["both"] == before + after  # both passes, none twice or missed
