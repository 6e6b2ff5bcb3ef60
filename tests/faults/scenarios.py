"""The fault cases of docs/reliability.md, each a function that runs one case on the harness
and returns an ``Outcome``: the checker's report plus the case's own figures. Tests
assert on outcomes (tests/faults/test_*.py); ``python -m tests.faults.figures`` repeats
them at full size and prints the §4 table.

Settings shared by the cases: L = lease, R = resync (reap) period, seconds, small so
a case takes seconds; every case uses ``appendfsync always`` on the store server.
"""

from __future__ import annotations

import pathlib
import random
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from tests.faults.checker import Report
from tests.faults.fleet import wait_until
from tests.faults.harness import Harness, now_ms


@dataclass
class Outcome:
    case: str
    n: int
    faults: int
    report: Report
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.report.ok

    def __str__(self) -> str:
        return (
            f"{self.case}: N={self.n}, faults={self.faults}, {self.figures}\n"
            + self.report.summary()
        )


def _up(h: Harness) -> None:
    if not h.replicas_up(timeout=60):
        h.close()
        raise AssertionError(f"replicas did not start; logs:\n{h.fleet.log_text()[-3000:]}")


def _kill_an_owner(h: Harness, rng: random.Random, slots: list[int] | None = None) -> bool:
    """SIGKILL a replica that holds a running claim (restarted at once)."""
    pids = {h.fleet.pids[i] for i in (slots if slots is not None else range(len(h.fleet.pids)))}
    owners = sorted({r["pid"] for r in h.running() if r["pid"] in pids})
    if not owners:
        return False
    h.kill(h.fleet.index_of(rng.choice(owners)))
    return True


def owner_kills(
    tmp: pathlib.Path,
    n: int = 150,
    kills: int = 3,
    replicas: int = 3,
    seconds: float = 0.3,
    lease: float = 1.0,
    seed: int = 1,
    crash_after_effect: bool = True,
) -> Outcome:
    """F1: SIGKILL owners mid-run (restarted each time), plus one replica with an
    ``after_effect=crash`` failpoint (dies after the job's effect, before it is
    recorded): its invocation runs exactly twice, the second time as attempt 2."""
    rng = random.Random(seed)
    fp = [None] * (replicas - 1) + ["after_effect=crash:3"] if crash_after_effect else []
    with Harness(tmp, replicas=replicas, lease=lease, resync=0.5, failpoints=fp, seed=seed) as h:
        _up(h)
        h.enqueue_many(n, seconds=seconds, spread=n * seconds / (replicas * 4) * 0.8)
        done = 0
        deadline = time.monotonic() + 60
        while done < kills and time.monotonic() < deadline:
            time.sleep(0.4 + rng.random() * 0.4)  # spacing between kills (the fault plan)
            done += _kill_an_owner(h, rng, list(range(replicas - 1)))
        last = len(h.fleet.pids) - 1
        if crash_after_effect:
            wait_until(lambda: h.fleet.procs[last].poll() is not None, 20)
            if h.fleet.procs[last].poll() is not None:
                h.fleet.restart(last, failpoints="")
        finished = h.wait_done(n, 60)
    rep = h.check()
    crashed = {pid for _, action, pid, _ in h.hits if action == "crash"}
    hit_invs = {f"{x['job']}@{x['sched']}" for x in h.execs if x["pid"] in crashed}
    hit_invs = {inv for inv in hit_invs if h.writes.get(inv) == 2}  # effect done twice
    after_effect = sorted(
        [x["attempt"] for x in h.execs if f"{x['job']}@{x['sched']}" == inv] for inv in hit_invs
    )
    return Outcome(
        "F1 SIGKILL owners",
        n,
        done + len(crashed),
        rep,
        {
            "finished": finished,
            "kills": done,
            "crash_after_effect": len(crashed),
            "after_effect_attempts": after_effect,
            "recovery_ms_max": max(rep.recovery_ms, default=None),
            "recovery_ms_median": _median(rep.recovery_ms),
            "reclaim_ms_max": max(rep.reclaim_ms, default=None),
        },
    )


def owner_pause(tmp: pathlib.Path, lease: float = 1.0, at: str = "mid_run") -> Outcome:
    """F2: SIGSTOP an owner for 3 L, then SIGCONT. ``at="mid_run"``: stopped while the
    job runs (SIGSTOP from outside); ``at="before_complete"``: the replica stops itself
    at the failpoint just before recording the outcome (its commit must be refused)."""
    fp = ["before_complete=stop:1", None] if at == "before_complete" else []
    with Harness(tmp, replicas=2, workers=1, lease=lease, resync=0.5, failpoints=fp) as h:
        _up(h)
        if at == "before_complete":  # only replica 0 has the failpoint: let it claim
            h.fleet.signal(1, signal.SIGSTOP)
        h.enqueue_many(1, seconds=1.5 * lease if at == "mid_run" else 0.0)
        assert wait_until(lambda: len(h.witness.log()) == 1, 15), "the job never started"
        first = h.witness.log()[0]
        owner = h.fleet.index_of(first["pid"])
        if at == "before_complete":
            assert wait_until(lambda: bool(h.failpoint_hits()), 10), "failpoint never hit"
            h.fleet.signal(1, signal.SIGCONT)
            stopped = now_ms()
        else:
            h.fleet.signal(owner, signal.SIGSTOP)
            stopped = now_ms()
        rerun = wait_until(lambda: len(h.witness.log()) == 2, 3 * lease + 10)
        time.sleep(max(0.0, 3 * lease - (now_ms() - stopped) / 1000))  # the pause: 3 L
        h.fleet.signal(owner, signal.SIGCONT)
        h.note("stop", stopped, now_ms(), first["pid"])
        finished = h.wait_done(1, 15)
        wait_until(lambda: "stale commit rejected" in h.fleet.log_text(), 10)
    rep = h.check()
    return Outcome(
        f"F2 SIGSTOP owner ({at})",
        1,
        1,
        rep,
        {
            "rerun": rerun,
            "finished": finished,
            "executions": rep.executions,
            "fenced_writes": h.fenced_writes,
            "fenced_rejects": rep.fenced_rejects,
            "stale_commits_rejected": rep.stale_commits_rejected,
        },
    )


def redis_restart(tmp: pathlib.Path, n: int = 200, kill: bool = True) -> Outcome:
    """F3: under load, SIGKILL redis-server (``kill``; else SHUTDOWN) and restart it on
    the same data dir (AOF, appendfsync always). Nothing acknowledged is lost."""
    with Harness(tmp, replicas=3, lease=2.0, resync=0.5) as h:
        _up(h)
        h.enqueue_many(n, seconds=0.05, spread=4.0)
        time.sleep(1.0)  # let the load run before the crash (the fault plan)
        down = now_ms()
        if kill:
            h.store_server.kill()
        else:
            h.store_server.stop()
        time.sleep(1.0)  # the downtime
        h.store_server.start()
        back = now_ms()
        h.note("outage", down, back)
        finished = h.wait_done(n, 60)
        resume = _resume_ms(h, back)
    rep = h.check()
    return Outcome(
        "F3 Redis SIGKILL + restart (AOF always)" if kill else "F3 Redis SHUTDOWN + restart",
        n,
        1,
        rep,
        {"finished": finished, "resume_ms": resume},
    )


def _resume_ms(h: Harness, healed: float) -> float | None:
    """The slowest replica's first claim after ``healed`` (ms); None if one never did."""
    firsts: dict[int, int] = {}
    for e in h.recorder.snapshot():
        if e["kind"] == "claimed" and e["at"] >= healed:
            pid = int(e["detail"].rsplit("-", 2)[1])
            firsts.setdefault(pid, e["at"])
    live = [p for p in h.fleet.pids]
    if not all(p in firsts for p in live):
        return None
    return max(firsts[p] for p in live) - healed


def redis_unreachable(
    tmp: pathlib.Path, seconds: float = 10.0, how: str = "blackhole", n: int = 120
) -> Outcome:
    """F5: Redis unreachable for ``seconds`` (L = 2 s): proxy ``blackhole`` or ``reset``,
    or ``sigstop`` on the server. Jobs fall due during the outage and just after it; all
    replicas must be claiming again within 3 s of the heal; nothing is lost."""
    with Harness(tmp, replicas=3, lease=2.0, resync=0.5, proxy=how != "sigstop") as h:
        _up(h)
        h.enqueue_many(n // 4, seconds=0.0, spread=1.0)  # runs before the outage
        h.enqueue_many(n // 4, seconds=0.2, delay=1.5, spread=seconds - 1)  # during
        h.enqueue_many(n - 2 * (n // 4), seconds=0.2, delay=seconds + 1.0, spread=3.0)
        time.sleep(1.0)
        healed = h.outage(seconds, how)
        wait_until(lambda: _resume_ms(h, healed) is not None, 10)
        resume = _resume_ms(h, healed)
        finished = h.wait_done(n, 60)
    rep = h.check()
    return Outcome(
        f"F5 Redis unreachable {seconds:g} s ({how})",
        n,
        1,
        rep,
        {"finished": finished, "resume_ms": resume},
    )


def clock_skew(
    tmp: pathlib.Path, skews: tuple[float, ...] = (-300.0, -5.0, 0.0, 5.0, 300.0), n: int = 100
) -> Outcome:
    """F6: replicas whose wall clocks are off by ``skews`` seconds; lateness is measured
    on the witness server's clock (start - scheduled) and on Redis (claim - scheduled)."""
    with Harness(
        tmp, replicas=len(skews), workers=2, lease=5.0, resync=1.0, skews=list(skews)
    ) as h:
        _up(h)
        h.enqueue_many(n, task="witness.hit", delay=0.5, spread=3.0)
        finished = h.wait_done(n, 30)
    rep = h.check()
    late = [x["start_ms"] - x["sched"] for x in h.execs]
    pids = {x["pid"] for x in h.execs}
    return Outcome(
        f"F6 replica clock skew {sorted(skews)} s",
        n,
        len(skews),
        rep,
        {
            "finished": finished,
            "early_runs": sum(1 for x in late if x < 0),
            "lateness_ms_p50": _median(late),
            "lateness_ms_max": max(late, default=None),
            "replicas_that_ran": len(pids),
        },
    )


def sigterm(tmp: pathlib.Path, n: int = 16, seconds: float = 0.6) -> Outcome:
    """F13: SIGTERM a replica mid-run: its running jobs finish, its unstarted claims are
    handed back (re-claimed within R, not L + R); nothing is lost."""
    with Harness(tmp, replicas=2, workers=2, lease=5.0, resync=0.5, shutdown_timeout=10) as h:
        _up(h)
        h.enqueue_many(n, seconds=seconds)
        assert wait_until(lambda: len(h.running()) >= 4, 10)
        at = now_ms()
        h.fleet.signal(0, signal.SIGTERM)
        code = h.fleet.procs[0].wait(20)
        h.note("term", at, pid=h.fleet.pids[0])
        finished = h.wait_done(n, 60)
    rep = h.check()
    released = [e for e in h.events if e["kind"] == "released"]
    return Outcome(
        "F13 SIGTERM a replica",
        n,
        1,
        rep,
        {
            "finished": finished,
            "exit_code": code,
            "handed_back": len(released),
            "lease_lost": sum(1 for e in h.events if e["kind"] == "lease_lost"),
        },
    )


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None
