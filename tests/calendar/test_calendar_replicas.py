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


UP = 60.0  # s: the longest this test waits for the replicas to start, or to catch up


def even_after(t: float) -> int:
    """The first even second after ``t`` (where "*/2" fires next)."""
    return int(t) + 1 + (int(t) + 1) % 2


def test_replicas_cross_a_dst_change_without_double_or_miss(
    redis_url, redis_ns, redis_client, tmp_path
):
    """No bound here is this box's speed. The jobs are enqueued as the fleet starts, 14 s
    before the change (not after the replicas are up: on a busy box three interpreters can
    take most of those 14 s to start). A replica the box starves claims an occurrence
    late: past the default grace (the 2 s period) that is a misfire skip, a miss the box
    made, not the daylight-saving code; so the jobs catch up (``misfire="catch_up"``):
    every occurrence runs, late or not, and exactly once. The test then waits for the occurrences up
    to ``end`` to be witnessed (with a deadline), not for a fixed 1.5 s after ``end``."""
    key = f"w{uuid.uuid4().hex[:8]}"
    start = CHANGE - 14  # the producer's "now": 00:59:46 UTC = 02:59:46 CEST
    end = CHANGE + 12
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
        firsts: dict[str, tuple[int, int]] = {}  # the first occurrence: one of two
        for policy in Ambiguous:
            t0 = clock.now()
            client.enqueue(
                "witness.hit",
                job_id=policy.value,
                cron=Cron(every_2s_in_hour_2, "Europe/Paris", ambiguous=policy),
                misfire="catch_up",  # late (a starved replica): each still runs, once
            )
            # the first even second after the enqueue began, or after it ended
            firsts[policy.value] = (even_after(t0), even_after(clock.now()))
        assert clock.now() < CHANGE - 4, "enqueueing took most of the lead"
        assert wait_until(
            lambda: len(redis_client.keys(f"duetime:{{{redis_ns}}}:replica:*")) == 3, UP
        ), "replicas not up"

        def runs() -> dict[str, list[int]]:
            log = witness_log(redis_client, key)
            return {
                p.value: sorted(
                    e["sched"] for e in log if e["job"] == p.value and e["sched"] <= end * 1000
                )
                for p in Ambiguous
            }

        after = [s * 1000 for s in range(int(CHANGE), int(end) + 1, 2)]  # 01:00:00 ...
        # until each job's last occurrence up to `end` is witnessed ("first" runs none
        # after the change: its last is 00:59:58)
        last = {"first": (CHANGE - 2) * 1000, "last": end * 1000, "both": end * 1000}
        assert wait_until(
            lambda: clock.now() > end and all(r and r[-1] == last[p] for p, r in runs().items()),
            (end - clock.now()) + UP,
        ), runs()
        codes = fleet.stop()
    assert codes == [0, 0, 0]

    got = runs()
    counts = {k.decode(): int(v) for k, v in redis_client.hgetall(f"{key}:execs").items()}
    assert counts and set(counts.values()) == {1}, "an invocation ran twice"

    def before(policy: Ambiguous) -> list[int]:  # ... 00:59:58
        first = got[policy.value][0] // 1000 if got[policy.value] else 0
        assert first in firsts[policy.value], (first, firsts[policy.value])
        return [s * 1000 for s in range(first, int(CHANGE), 2)]

    # the first pass of 02:xx (CEST) precedes the change; the second (CET) follows it
    assert got["first"] == before(Ambiguous.FIRST)  # the repeated hour does not rerun
    assert got["last"] == after  # only the second pass
    assert got["both"] == before(Ambiguous.BOTH) + after  # both passes, none twice or missed
