"""More fault cases of docs/reliability.md (see scenarios.py): F4, F7, F8, F10, F10d, F11, F12."""

from __future__ import annotations

import pathlib
import random
import signal
import time

import redis

from scheduler.errors import DuetimeError
from scheduler.model import RetryPolicy
from tests.faults.fleet import wait_until
from tests.faults.harness import TERMINAL_KINDS as TERMINAL
from tests.faults.harness import Harness, now_ms
from tests.faults.scenarios import Outcome, _kill_an_owner, _median, _up


def redis_empty(tmp: pathlib.Path, n: int = 60) -> Outcome:
    """F4a: Redis without persistence restarts empty. Passing means the loss is
    *detected* (alarm in the replicas' logs and a data_loss event) and reported."""
    with Harness(tmp, replicas=2, lease=2.0, resync=0.5, appendonly=False) as h:
        _up(h)
        h.enqueue_many(n, seconds=0.1, delay=3.0, spread=2.0)  # pending at the restart
        time.sleep(0.5)
        at = now_ms()
        h.store_server.kill()
        h.store_server.start()
        h.note("data_loss", at, now_ms())
        detected = wait_until(lambda: "lost duetime's data" in h.fleet.log_text(), 10)
        detect_ms = now_ms() - at
    rep = h.check(drained=False)
    return Outcome(
        "F4 Redis restarts empty (no persistence)",
        n,
        1,
        rep,
        {
            "detected": detected,
            "detect_ms": round(detect_ms) if detected else None,
            "reported_lost": rep.lost,
            "data_loss_events": sum(1 for e in h.events if e["kind"] == "data_loss"),
        },
    )


def _sent_as(h: Harness, script: str) -> bytes:
    """What a call of ``script`` names on the wire: its function (FCALL), or its SHA1."""
    sent = h.client.store._scripts[script]  # type: ignore[attr-defined]
    return str(sent.function or sent.sha).encode()


def slow_network(tmp: pathlib.Path, n: int = 150, delay_ms: float = 100.0) -> Outcome:
    """F7: every reply delayed ``delay_ms`` ± 50 %, then 400 ms; then one lost reply on
    each of claim, renew and complete_many (the command ran, the client saw a reset)."""
    with Harness(tmp, replicas=3, lease=2.0, resync=0.5, proxy=True) as h:
        assert h.proxy is not None
        _up(h)
        h.proxy.delay(delay_ms, delay_ms / 2)
        t0 = time.monotonic()
        h.enqueue_many(n // 3, seconds=0.1)
        h.wait_done(n // 3, 60)
        slow_s = time.monotonic() - t0
        h.proxy.delay(400, 100)  # RTT L/5: a new connection's handshake costs more
        slow_from = now_ms()
        h.enqueue_many(n // 3, seconds=0.1)
        h.wait_done(2 * (n // 3), 90)
        h.proxy.delay(0)
        h.note("slow_network", slow_from, now_ms())
        h.enqueue_many(n - 2 * (n // 3), seconds=1.0, spread=3.0)  # renewals happen
        extra = 0
        # successes commit in batches, mostly in a claim's round trip (one pipeline: a
        # drop armed for either script loses the reply of both, and both are resent)
        for script in ("claim", "renew", "complete_many"):
            before = h.proxy.dropped_replies
            h.proxy.drop_reply_once(_sent_as(h, script))
            # until its reply was dropped (a link that dies first arms it again, proxy.py):
            # when the jobs ran out first (fast hand-offs), a top-up of 1 s jobs (> L/3)
            # brings a claim, renewals and successes
            while not wait_until(
                lambda: h.proxy is not None and h.proxy.dropped_replies > before, 3
            ):
                assert extra < 30, f"{script} was never called with the drop armed"
                h.enqueue_many(3, seconds=1.0)
                extra += 3
        dropped = h.proxy.dropped_replies
        finished = h.wait_done(n + extra, 60)
    rep = h.check()
    return Outcome(
        "F7 slow and lossy network",
        n + extra,
        2 + dropped,
        rep,
        {
            "finished": finished,
            "dropped_replies": dropped,
            "throughput_at_delay_jobs_s": round((n // 3) / slow_s, 1),
        },
    )


def scale(
    tmp: pathlib.Path,
    n: int = 10_000,
    replicas: int = 5,
    kills: int = 10,
    recurring: int = 20,
    seed: int = 8,
    seconds: float = 0.02,
) -> Outcome:
    """F8: ``n`` one-off jobs of ``seconds`` due at once on ``replicas`` replicas, plus
    fixed-rate jobs at 1 s, with ``kills`` SIGKILLs of owners spread over the drain (the
    jobs take a little time so that owners hold running claims while the drain lasts:
    batched claims drain no-op jobs in a few seconds)."""
    rng = random.Random(seed)
    with Harness(tmp, replicas=replicas, workers=4, lease=2.0, resync=0.5, seed=seed) as h:
        _up(h)
        for i in range(recurring):
            h.every(f"rec{i}", 1.0)
        t0 = time.monotonic()
        h.enqueue_many(n, seconds=seconds, batch=1000)
        done = 0
        while done < kills and time.monotonic() - t0 < 60:
            time.sleep(0.3 + rng.random() * 0.5)
            done += _kill_an_owner(h, rng)
        finished = h.wait_done(n, 240)
        drain_s = time.monotonic() - t0
        for i in range(recurring):
            h.client.cancel(f"rec{i}")
        slow = h.raw.slowlog_get(128)
    rep = h.check()
    return Outcome(
        f"F8 {n} jobs, {replicas} replicas, {kills} kills",
        n,
        done,
        rep,
        {
            "finished": finished,
            "kills": done,
            "drain_s": round(drain_s, 1),
            "jobs_per_s": round(n / drain_s),
            "slowlog_max_us": max((int(e["duration"]) for e in slow), default=0),
            "recovery_ms_max": max(rep.recovery_ms, default=None),
            "reclaim_ms_max": max(rep.reclaim_ms, default=None),
            "recovery_ms_median": _median(rep.recovery_ms),
        },
    )


def memory_pressure(tmp: pathlib.Path, n: int = 60) -> Outcome:
    """F10: ``maxmemory`` with ``noeviction``: a producer filling Redis gets a clear
    error, nothing half-written, nothing evicted; replicas keep running what is stored."""
    with Harness(tmp, replicas=2, lease=2.0, resync=0.5, server_args=["--maxmemory", "4mb"]) as h:
        _up(h)
        h.enqueue_many(n, seconds=0.05, spread=2.0)
        big = {"pad": "x" * 60_000}
        refused: Exception | None = None
        padding: list[str] = []
        for _ in range(400):
            before = len(h.raw.keys(h.keys.job("*")))
            try:
                padding.append(h.client.enqueue("witness.padded", kwargs=big, delay=3600))
            except (DuetimeError, ValueError, redis.RedisError) as exc:
                refused = exc
                break
        after = len(h.raw.keys(h.keys.job("*")))
        half_written = after != before
        finished = h.wait_done(n, 60)
        info = h.raw.info()
        try:
            h.client.cancel(padding[0])
            cancel_under_oom = "accepted"
        except redis.RedisError as exc:
            cancel_under_oom = f"refused: {exc}"[:80]
        h.raw.config_set("maxmemory", "0")  # the operator's fix: more memory
        for job in padding:  # due in an hour: not part of this run
            h.client.cancel(job)
        still = _probe_after_oom(h)
    rep = h.check()
    return Outcome(
        "F10 maxmemory + noeviction",
        n,
        1,
        rep,
        {
            "refused": type(refused).__name__ if refused else None,
            "message": str(refused)[:160] if refused else None,
            "half_written": half_written,
            "evicted_keys": info.get("evicted_keys"),
            "finished": finished,
            "runs_after_freeing": still,
            "cancel_under_oom": cancel_under_oom,
        },
    )


def full_drain(
    tmp: pathlib.Path, n: int = 1200, spread: float = 3.0, wait: float = 60.0
) -> Outcome:
    """F10d: a full Redis drains itself. ``n`` one-off jobs, nine in ten due at once and
    the rest over the next ``spread`` s (so that an early start would show), then Redis
    filled (``maxmemory`` just above what they take, ``noeviction``) until an enqueue is
    refused; one replica was running before (stopped while Redis fills), one starts on the
    full Redis. Both claim and finish every job without ``maxmemory`` being touched: 0
    lost, 0 run twice, none before its time. ``drain_s``: from the replicas' start until
    the last job due then has finished (the recorded events' times)."""
    with Harness(tmp, replicas=1, lease=5.0, resync=0.5) as h:
        _up(h)
        h.fleet.signal(0, signal.SIGSTOP)  # it claims nothing while the backlog is stored
        now, later = h.enqueue_many(n - n // 10), h.enqueue_many(n // 10, spread=spread)
        limit = int(h.raw.info("memory")["used_memory"]) + 1_000_000
        h.raw.config_set("maxmemory", limit)
        refused: list[str] = []
        for size in (50_000, 1_000, 10):  # big pads, then smaller ones: Redis is full
            for _ in range(1000):
                try:
                    h.client.enqueue("witness.padded", kwargs={"pad": "x" * size}, delay=3600)
                except DuetimeError as exc:
                    refused.append(f"{type(exc).__name__}: {exc}")
                    break
        before = h.raw.info("memory")
        started = now_ms()
        h.fleet.signal(0, signal.SIGCONT)
        h.fleet.add(1)  # a replica that starts on the full Redis
        finished = h.wait_done(n, wait)
        after = h.raw.info("memory")
        try:
            h.client.enqueue("witness.padded", delay=3600)
            still_full = False
        except DuetimeError:
            still_full = True
        untouched = h.raw.config_get("maxmemory") == {"maxmemory": str(limit)}
    rep = h.check()
    ours = [x for x in h.execs if x["job"] in h.expected]
    backlog = set(now) | {x["job"] for x in ours if x["sched"] <= started}
    ends = [e["at"] for e in h.events if e["kind"] in TERMINAL and e["job"] in backlog]
    return Outcome(
        "F10d a full Redis drains itself",
        n,
        1,
        rep,
        {
            "finished": finished,
            "due_at_start": len(backlog),
            "drain_s": round((max(ends, default=started) - started) / 1000, 2),
            "replicas": 2,
            "claiming_replicas": len({e["detail"] for e in h.events if e["kind"] == "claimed"}),
            "refused": refused,
            "used_memory_before": int(before["used_memory"]),
            "used_memory_after": int(after["used_memory"]),
            "maxmemory": limit,
            "maxmemory_untouched": untouched,
            "still_full": still_full,
            "early": sum(1 for x in ours if x["start_ms"] < x["sched"]),
            "executed": len({x["job"] for x in h.execs} & {*now, *later}),
        },
    )


def assert_drained(out: Outcome, due: int = 1000) -> None:
    """F10d's verdict: at least ``due`` jobs due when the replicas start, every job run
    once, none early, the Redis full before and after, its ``maxmemory`` untouched, both
    replicas claiming; the time to drain printed."""
    f = out.figures
    print(
        f"\nF10d: {f['due_at_start']} jobs due (of {out.n}) drained by {f['replicas']} "
        f"replicas in {f['drain_s']} s on a full Redis: used_memory "
        f"{f['used_memory_before']} -> {f['used_memory_after']} B, maxmemory "
        f"{f['maxmemory']} B, untouched"
    )
    assert out.ok, out
    assert f["refused"] and all(r.startswith("StoreFullError: ") for r in f["refused"]), out
    assert f["used_memory_after"] > f["maxmemory"] and f["still_full"], out
    assert f["finished"] and f["executed"] == out.n and f["due_at_start"] >= due, out
    assert out.report.lost == 0 and out.report.executions == out.n, out
    assert sum(out.report.duplicates.values()) == 0 and out.report.duplicate_commits == 0, out
    assert f["early"] == 0 and f["maxmemory_untouched"], out
    assert f["claiming_replicas"] == 2, out


def _probe_after_oom(h: Harness) -> bool:
    """After cancelling the padding, a new job is accepted and runs."""
    try:
        job = h.client.enqueue("witness.work", kwargs={"seconds": 0.0})
    except Exception:
        return False
    h.expected.add(job)
    return wait_until(lambda: h.raw.hget(h.keys.job(job), "state") == "succeeded", 15)


def long_jobs(tmp: pathlib.Path, lease: float = 1.0) -> Outcome:
    """F11: (a) jobs running 5 L with heartbeats: never re-claimed; (b) a job past its
    ``timeout`` (max runtime) is told through its token and its attempt ends as a
    failure (retried once, then failed and dead-lettered)."""
    with Harness(tmp, replicas=2, workers=2, lease=lease, resync=0.5) as h:
        _up(h)
        long_ = h.enqueue_many(2, seconds=5 * lease)
        capped = h.client.enqueue(
            "witness.work",
            kwargs={"seconds": 30.0},
            timeout=lease,
            retry=RetryPolicy(max_attempts=2, backoff=0.1),
        )
        h.expected.add(capped)
        finished = h.wait_done(3, 60)
    rep = h.check()
    claims = {
        j: sum(1 for e in h.events if e["job"] == j and e["kind"] == "claimed") for j in long_
    }
    return Outcome(
        "F11 long jobs (5 L) and max runtime",
        3,
        0,
        rep,
        {
            "finished": finished,
            "long_job_claims": sorted(claims.values()),
            "capped_job_events": [e["kind"] for e in h.events if e["job"] == capped],
        },
    )


def failing_renewals(tmp: pathlib.Path, lease: float = 1.0) -> Outcome:
    """F11 (renewal loss): renewals fail on the owner (failpoint ``renew=fail:1-4``, so
    the lease lapses in Redis); another replica takes the invocation over; the first
    owner is told (lease lost) at its next renewal and its commit is refused."""
    with Harness(
        tmp, replicas=2, workers=1, lease=lease, resync=0.5, failpoints=["renew=fail:1-4", None]
    ) as h:
        _up(h)
        h.fleet.signal(1, signal.SIGSTOP)  # let replica 0 (with the failpoint) claim
        h.enqueue_many(1, seconds=4 * lease)
        assert wait_until(lambda: len(h.witness.log()) == 1, 15), "the job never started"
        h.fleet.signal(1, signal.SIGCONT)
        finished = h.wait_done(1, 30)
        told = wait_until(lambda: "lease lost" in h.fleet.log_text(), 10)
    rep = h.check()
    return Outcome(
        "F11 renewals failing",
        1,
        1,
        rep,
        {
            "finished": finished,
            "owner_told": told,
            "executions": rep.executions,
            "stale_commits_rejected": rep.stale_commits_rejected,
        },
    )


def script_flush(tmp: pathlib.Path, n: int = 300) -> Outcome:
    """F12: SCRIPT FLUSH and FUNCTION FLUSH mid-load: the libraries (or scripts) are loaded
    again, nothing fails or is lost."""
    with Harness(tmp, replicas=3, lease=2.0, resync=0.5) as h:
        _up(h)
        h.enqueue_many(n, seconds=0.0, spread=3.0)
        for _ in range(3):
            time.sleep(0.7)
            h.raw.script_flush()
            h.raw.function_flush()
        finished = h.wait_done(n, 30)
        failed = int(h.raw.hget(h.keys.stats, "failed") or 0)
    rep = h.check()
    return Outcome(
        "F12 SCRIPT FLUSH under load", n, 3, rep, {"finished": finished, "failed": failed}
    )
