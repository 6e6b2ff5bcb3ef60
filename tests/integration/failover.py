"""A Sentinel failover under load, measured (issue 5 fault case F9; issue 6 part 3).

Replica processes (``duetime run --redis redis+sentinel://...``) run ``witness.hit`` jobs
that a producer thread enqueues as fast as it can (a short pause between enqueues); the
primary is SIGKILLed mid-run, the sentinels promote the replica, the producer carries on.
Executions are counted by the witness (tests/faults/witness.py) on a *separate*
redis-server, so the count survives whatever the failover does to the store.

What is reported (``FailoverReport``), from the producer's acknowledgement log, the new
primary's state and the witness:

- ``lost_never_ran``: enqueues acknowledged, missing on the new primary, never executed:
  silent loss of a job from the producer's point of view;
- ``lost_but_ran``: acknowledged, executed before the failover, then missing (its record);
- ``reruns``: executions beyond one per invocation; ``reruns_same_attempt`` of them repeat an
  attempt number (a lost claim: Redis forgot the invocation had started), the rest carry a
  higher attempt (a lost completion: re-run after the lease);
- ``failover_events`` / ``data_loss_events``: what was recorded in the namespace's stats;
  ``lost_claims_detected`` (from the replicas' logs) and ``lost_writes_detected`` (the
  producer's own count): how many lost writes the fence / seq watermarks noticed;
- ``stuck``: jobs on the new primary that never reached a final state (must be 0).
"""

from __future__ import annotations

import json
import pathlib
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from scheduler import Client
from scheduler.stores.redis import StoreUnavailableError
from scheduler.stores.redis.protocol import records, urls
from scheduler.stores.redis.protocol.keys import Keys
from tests.faults.fleet import replicas, wait_until
from tests.sentinel_fixtures import SentinelCluster

FINAL = {"succeeded", "failed", "cancelled"}
LOST_CLAIMS = re.compile(r"at least (\d+) acknowledged claim")


@dataclass
class FailoverReport:
    wait_replicas: int
    fault: str = "kill"
    acked: int = 0  # enqueues acknowledged to the producer
    acked_per_s: float = 0.0  # before the kill
    refused: int = 0  # enqueues that raised (not acknowledged: not a loss)
    acked_after: int = 0  # acknowledged after the new primary answered
    after_not_once: int = 0  # of those, not executed exactly once (must be 0)
    lost_never_ran: int = 0
    lost_but_ran: int = 0
    lost_confirmed: int = 0  # lost enqueues that WAIT had confirmed on a replica
    executions: int = 0
    reruns: int = 0
    reruns_same_attempt: int = 0
    window_starts: int = 0  # executions started in the second before the kill
    stuck: int = 0
    failover_s: float = 0.0  # kill -> sentinels name a new primary that answers
    split_s: float = 0.0  # "stop": SIGCONT -> the old primary is a replica again
    stall_s: float = 0.0  # longest gap between two acknowledged enqueues
    failover_events: int = 0
    data_loss_events: int = 0
    lost_claims_detected: int = 0  # replicas' logs: fence counter below their watermark
    lost_writes_detected: int = 0  # the producer's: seq counter below its watermark
    unreplicated_writes: int = 0  # producer's writes WAIT did not confirm
    details: list[str] = field(default_factory=list)

    def line(self) -> str:
        d = asdict(self)
        d.pop("details")
        return json.dumps(d)


def run_failover(
    cluster: SentinelCluster,
    witness_url: str,
    log_dir: pathlib.Path,
    *,
    wait_replicas: int = 0,
    count: int = 2,
    workers: int = 4,
    before: float = 1.5,
    after: float = 1.5,
    pause: float = 0.002,
    restart_old: bool = False,
    drain_timeout: float = 30.0,
    fault: str = "kill",
) -> FailoverReport:
    """Run the scenario once on ``cluster`` (which it fails over); the measured report.
    ``fault``: "kill" SIGKILLs the primary; "stop" SIGSTOPs it until the failover is done,
    then SIGCONTs it (a split brain: clients still connected to it write there until the
    sentinels demote it, and its data is then replaced by the new primary's)."""
    ns, key = f"f{uuid.uuid4().hex[:8]}", f"w{uuid.uuid4().hex[:8]}"
    keys = Keys(ns)
    report = FailoverReport(wait_replicas=wait_replicas, fault=fault)
    witness = redis.Redis.from_url(witness_url, decode_responses=True)
    store_r = urls.connect(cluster.url, decode_responses=True)
    extra = ("--wait-replicas", str(wait_replicas)) if wait_replicas else ()
    acked: list[tuple[str, float]] = []
    unconfirmed: set[str] = set()  # acknowledged, but WAIT timed out (wait_replicas > 0)
    stop = threading.Event()

    def produce() -> None:
        with Client(cluster.url, namespace=ns, wait_replicas=wait_replicas) as client:
            waiter = client.store.waiter  # type: ignore[attr-defined]
            while not stop.is_set():
                before_n = waiter.unreplicated_writes
                try:
                    acked.append((client.enqueue("witness.hit"), time.monotonic()))
                except StoreUnavailableError:
                    report.refused += 1
                else:
                    if waiter.unreplicated_writes != before_n:
                        unconfirmed.add(acked[-1][0])
                stop.wait(pause)
            report.unreplicated_writes = waiter.unreplicated_writes
            report.lost_writes_detected = client.store.replication.lost_writes  # type: ignore[attr-defined]

    with replicas(
        cluster.url,
        ns,
        key,
        count=count,
        workers=workers,
        lease=2,
        resync=0.5,
        log_dir=log_dir,
        witness_url=witness_url,
        extra=extra,
    ):
        assert wait_until(lambda: len(store_r.keys(keys.replica("*"))) == count, 30), (
            f"replicas did not start; logs in {log_dir}"
        )
        producer = threading.Thread(target=produce, name="producer")
        producer.start()
        try:
            time.sleep(before)  # load duration before the fault, not a sync point
            sec, usec = witness.time()
            kill_ms = sec * 1000 + usec // 1000
            report.acked_per_s = len(acked) / before
            t_kill = time.monotonic()
            old = cluster.kill_primary() if fault == "kill" else cluster.stop_primary()
            cluster.wait_failover(old)
            t_new = time.monotonic()
            report.failover_s = t_new - t_kill
            if fault == "stop":
                cluster.resume(old)
                report.split_s = cluster.wait_demoted(old)
            elif restart_old:  # it rejoins as a replica of the new primary
                cluster.server_at(old[1]).restart()
            time.sleep(after)  # load duration after the failover
        finally:
            stop.set()
            producer.join(30)
        drained = wait_until(lambda: _pending(store_r, keys) == 0, drain_timeout, 0.1)
        report.details.append(f"drained={drained}")
    for path in log_dir.glob("replica-*.log"):  # complete, unlike the capped event stream
        report.lost_claims_detected += sum(int(n) for n in LOST_CLAIMS.findall(path.read_text()))
    _account(report, acked, t_new, store_r, keys, witness, key, kill_ms)
    if wait_replicas:
        report.lost_confirmed = sum(
            1 for jid, _ in acked if jid not in unconfirmed and not store_r.exists(keys.job(jid))
        )
    store_r.close()
    witness.close()
    return report


def _pending(r: Any, keys: Keys) -> int:
    """Invocations due or running in the namespace (0 once everything has run)."""
    with r.pipeline(transaction=False) as p:
        for lane in r.smembers(keys.lanes) or ["default"]:
            p.zcard(keys.due(lane))
        p.hlen(keys.running)
        return int(sum(p.execute()))


def _account(
    report: FailoverReport,
    acked: list[tuple[str, float]],
    t_new: float,
    r: Any,
    keys: Keys,
    witness: Any,
    key: str,
    kill_ms: int,
) -> None:
    report.acked = len(acked)
    gaps = [b[1] - a[1] for a, b in zip(acked, acked[1:], strict=False)]
    report.stall_s = max(gaps, default=0.0)
    with r.pipeline(transaction=False) as p:
        for jid, _ in acked:
            p.hget(keys.job(jid), "state")
            p.exists(keys.job(jid))
        flat = p.execute()
    states = {jid: (flat[2 * i], flat[2 * i + 1]) for i, (jid, _) in enumerate(acked)}
    execs: dict[str, int] = {}
    for inv, n in witness.hgetall(f"{key}:execs").items():
        execs[inv.rsplit("@", 1)[0]] = execs.get(inv.rsplit("@", 1)[0], 0) + int(n)
    log = [json.loads(x) for x in witness.lrange(f"{key}:log", 0, -1)]
    report.executions = len(log)
    report.reruns = sum(n - 1 for n in execs.values() if n > 1)
    seen: set[tuple[str, int, int]] = set()
    for e in log:
        k = (e["job"], e["sched"], e["attempt"])
        report.reruns_same_attempt += k in seen
        seen.add(k)
    report.window_starts = sum(1 for e in log if kill_ms - 1000 <= e["start_ms"] <= kill_ms)
    for jid, (state, exists) in states.items():
        if not exists:
            if jid in execs:
                report.lost_but_ran += 1
            else:
                report.lost_never_ran += 1
        elif state not in FINAL:
            report.stuck += 1
    after = [jid for jid, t in acked if t > t_new]
    report.acked_after = len(after)
    report.after_not_once = sum(1 for jid in after if execs.get(jid) != 1)
    stats = r.hgetall(keys.stats)
    report.failover_events = int(stats.get("failover", 0))
    report.data_loss_events = int(stats.get("data_loss", 0))
    for _, f in r.xrange(keys.events):  # capped at ~10,000: details are best effort
        for e in records.events(f):
            if e.kind in ("failover", "data_loss"):
                report.details.append(f"{e.kind}: {e.detail}")
