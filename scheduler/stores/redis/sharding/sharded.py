"""ShardedStore: one namespace split into N shards, for Redis Cluster (or one Redis).

Each shard is exactly a namespace's keyspace under its own hash tag (protocol/keys.py: shard 0 is
``duetime:{ns}:``, shard i ``duetime:{ns#i}:``), so every Lua script still touches one
slot and runs unchanged, on whichever cluster node holds that slot. A job lives in shard
``crc32(job_id) mod N`` (sharding/shards.py; N is fixed per namespace). One ``RedisStore`` per
shard, over one shared client, does the work; this class routes and merges:

* by job id: add, cancel, pause, resume, trigger, backfill, get, and every token-checked
  write of a claim (complete, complete_many, fail, end_interrupted, release, renew);
  successes sent with a claim (``complete_and_claim``) ride with it to their own shard;
* merged: jobs (by next run), events (by time), ``data_loss_alarms``;
* ``next_id`` (``JobScheduler`` int ids): shard 0's counter.

Claiming. A claim visits shards in an order whose start rotates on every call (fairness:
no shard is always served first) and stops once the asked capacity is used up, so a busy
replica claiming one job touches one shard. It skips shards with nothing due: each shard
has a next-due estimate, from its last claim reply (``next``: covers the lanes asked and
the next lease expiry) and from wake-ups (one subscriber connection on every shard's
wake channel; the channel says which shard). A shard is visited when its estimate is
due, when it filled a lane's ask last time (more may wait), when asked for a lane its
estimate does not cover, or in a resync sweep (every ``resync`` s, jittered, and after
the subscriber (re)connects: pub/sub drops messages while disconnected). Without a live
subscription nothing is skipped. So an idle replica makes N claim calls per resync period
instead of 1 (the cost of N), and a wake-up costs one call, not N: no thundering herd.
A shard that fails (a node down) is set aside for ``SHARD_RETRY`` s and the others go on
(their claims are returned, never stranded); the round fails only if no shard answered.
The estimates live in sharding/rounds.py.

Ordering: invocations are claimed in (due, submission) order within a shard; across
shards only by due time as far as the estimates go (FIFO of equal due times holds per
shard only).
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from scheduler import flow, keyrules, validation
from scheduler.clock import Clock, MonotonicClock
from scheduler.errors import JobNotFoundError
from scheduler.flow import FlowState, Limit
from scheduler.limit_usage import TOP_KEYS, Hold, ScopeUsage
from scheduler.model import (
    AddResult,
    Claim,
    ClaimBatch,
    Commit,
    Event,
    JobInfo,
    JobSpec,
    Outcome,
    Quarantined,
    Reconciled,
    Retried,
)
from scheduler.stores.base import AckedClaim
from scheduler.stores.redis import ops, redo
from scheduler.stores.redis.claiming.wakeups import WakeSubscriptions
from scheduler.stores.redis.integrity import upkeep
from scheduler.stores.redis.protocol import urls
from scheduler.stores.redis.sharding import shards as sharding
from scheduler.stores.redis.sharding.rounds import Estimates
from scheduler.stores.redis.sharding.shards import shard_count_for
from scheduler.stores.redis.store import MAX_BATCH, RedisStore


class ShardedStore(WakeSubscriptions):
    """A namespace of ``shards`` shards (see the module docstring). ``redis_url``: any
    URL ``RedisStore`` takes (``redis+cluster://`` for a cluster) or a redis-py client;
    the other arguments are ``RedisStore``'s, for every shard."""

    def __init__(
        self,
        redis_url: str | Any = "redis://127.0.0.1:6379/0",
        namespace: str = "default",
        *,
        shards: int,
        clock: Clock | None = None,
        lease: float = 30.0,
        resync: float = 5.0,
        payload_limit: int = validation.DEFAULT_PAYLOAD_LIMIT,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        rng: random.Random | None = None,
    ) -> None:
        self.n = sharding.shard_count(shards)
        if isinstance(redis_url, str):
            self._r = urls.connect(redis_url, decode_responses=True)
        else:
            self._r = redis_url
        self.url = urls.safe(redis_url)
        self.namespace = namespace
        self.clock: Clock = clock or MonotonicClock()
        self.resync = resync
        self.shards = [
            RedisStore(
                self._r,
                namespace,
                clock=clock,
                lease=lease,
                resync=resync,
                payload_limit=payload_limit,
                wait_replicas=wait_replicas,
                wait_timeout_ms=wait_timeout_ms,
                shard=(i, self.n),
            )
            for i in range(self.n)
        ]
        for s in self.shards:
            s.url = self.url
        self.default_lease = self.shards[0].default_lease
        self.keys = self.shards[0].keys
        self._counted = False  # the namespace's shard count was checked
        self._estimates = Estimates(self.n, self.clock, resync, rng or random.Random())
        self._offset_ms = 0.0  # Redis time minus local time, last measured
        self._init_subscriptions()
        self._channel_shard = {s.keys.wake: i for i, s in enumerate(self.shards)}

    @property
    def redis(self) -> Any:
        """The shared redis-py client (decode_responses=True)."""
        return self._r

    @property
    def parts(self) -> list[RedisStore]:
        """The shards' stores, shard 0 first."""
        return list(self.shards)

    @property
    def data_loss_alarms(self) -> int:
        return sum(s.data_loss_alarms for s in self.shards)

    def shard(self, job_id: str) -> RedisStore:
        """The store of the shard that holds ``job_id`` (the first call checks the
        namespace's shard count: a wrong one would look in the wrong shards)."""
        self.check_namespace()
        return self.shards[sharding.shard_of(job_id, self.n)]

    def check_namespace(self, record: bool = False) -> None:
        """Check (until settled) the namespace's shard count and that this version reads its
        data layout (``LayoutRefusedError``); writers ``record`` a new count (shards.py)."""
        if not self._counted:
            with self.shards[0].reachable():
                self._counted = sharding.check_count(self._r, self.keys, self.url, record=record)

    def check_server(self) -> list[str]:
        """``RedisStore.check_server`` (shard 0's server checks and the shard count), and
        every shard's epoch recorded (data-loss detection per shard)."""
        warnings = self.shards[0].check_server()
        self._counted = True
        with self.shards[0].reachable():
            for s in self.shards[1:]:
                s.check_keys()
                s.adopt_epoch()
        return warnings

    # ---- producers ------------------------------------------------------------------------

    def next_id(self) -> int:
        self.check_namespace()
        return self.shards[0].next_id()

    def add(self, spec: JobSpec) -> AddResult:
        self.check_namespace(record=True)
        i = sharding.shard_of(spec.job_id, self.n)
        result = self.shards[i].add(spec)
        self._learn(i, result.due_in)
        return result

    def add_many(self, specs: Sequence[JobSpec]) -> list[AddResult]:
        """``RedisStore.add_many`` per shard holding some jobs; results in ``specs``' order."""
        self.check_namespace(record=True)
        groups = self._groups([spec.job_id for spec in specs])
        out: list[AddResult | None] = [None] * len(specs)
        for i, members in groups.items():
            results = self.shards[i].add_many([specs[n] for n in members])
            for n, result in zip(members, results, strict=True):
                out[n] = result
                self._learn(i, result.due_in)
        return [r for r in out if r is not None]

    def _learn(self, i: int, due_in: float | None) -> None:
        if due_in is not None:
            self._estimates.learn([i], self.clock.now() + due_in)

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per lane, over every shard: pending invocations and how many are due now."""
        out: dict[str, tuple[int, int]] = {}
        for shard in self.shards:
            for lane, (n, due) in shard.queue_depths().items():
                out[lane] = (out.get(lane, (0, 0))[0] + n, out.get(lane, (0, 0))[1] + due)
        return out

    def cancel(self, job_id: str) -> bool:
        return self.shard(job_id).cancel(job_id)

    def interrupt(self, job_id: str) -> int:
        return self.shard(job_id).interrupt(job_id)

    def interrupted(self, job_ids: Collection[str]) -> set[str]:
        ids = list(job_ids)  # one round trip per shard, not per job
        groups = self._groups(ids).items()
        return set().union(*(self.shards[i].interrupted([ids[n] for n in g]) for i, g in groups))

    def pause(self, job_id: str) -> bool:
        return self.shard(job_id).pause(job_id)

    def resume(self, job_id: str) -> bool:
        return self.shard(job_id).resume(job_id)

    def trigger(self, job_id: str) -> bool:
        return self.shard(job_id).trigger(job_id)

    def backfill(self, job_id: str, start: float, end: float) -> int:
        return self.shard(job_id).backfill(job_id, start, end)

    # ---- an operator's redo (``Redo``, base.py; redo.py) ---------------------------------

    def retry(self, job_id: str) -> Retried:
        return redo.retry(self, job_id)

    def retry_failed(self, task: str | None = None) -> list[Retried]:
        return redo.retry_failed(self, task)

    def set_limit(self, scope: str, limit: Limit | None) -> bool:
        flow.refuse_sharded(len(self.parts))
        return False  # never reached

    def limits(self) -> dict[str, Limit]:
        return {}

    def flow_of(self, key: str) -> FlowState:
        flow.refuse_sharded(len(self.parts))
        raise AssertionError  # never reached

    def limit_usage(self, top: int = TOP_KEYS) -> list[ScopeUsage]:
        return []  # a sharded namespace refuses limits (flow.refuse_sharded)

    def hold_of(self, job_id: str) -> Hold | None:
        if self.get(job_id) is None:
            raise JobNotFoundError(job_id)
        return None  # no limit holds a job of a sharded namespace: it has none

    def set_key_rule(
        self, template: str | None, *, task: str | None = None, lane: str | None = None
    ) -> bool:
        keyrules.declared(template, task, lane)  # bad input first, as unsharded
        flow.refuse_sharded(len(self.parts), "key rules")
        return False  # never reached

    def key_rules(self) -> dict[str, str]:
        return {}

    def delete(self, job_id: str) -> bool:
        return redo.delete(self, job_id)

    # ---- claiming -----------------------------------------------------------------------

    def serve(self, tasks: Callable[[], tuple[int, Sequence[str]]] | None) -> None:
        """``ServesTasks`` (base.py), on every shard."""
        for s in self.shards:
            s.serve(tasks)

    def claim_due(self, capacity: Mapping[str, int], lease: float | None, owner: str) -> ClaimBatch:
        """Claim from the shards that may have due work, in rotating order, until the
        capacity is used (see the module docstring)."""
        return self._claim(capacity, lambda i, asked: self.shards[i].claim_due(asked, lease, owner))

    def complete_and_claim(
        self,
        done: Sequence[tuple[Claim, Any]],
        capacity: Mapping[str, int],
        lease: float | None,
        owner: str,
    ) -> AckedClaim:
        """``AcksWithClaims`` (base.py): each shard's successes ride with its claim there; a
        shard not visited gets none (``None``: the caller's flush records them)."""
        groups = self._groups([c.job_id for c, _ in done])
        acks: list[Commit | None] = [None] * len(done)

        def send(i: int, asked: Mapping[str, int]) -> ClaimBatch:
            members = groups.pop(i, None)
            if not members:
                return self.shards[i].claim_due(asked, lease, owner)
            out = self.shards[i].complete_and_claim([done[n] for n in members], asked, lease, owner)
            for n, code in zip(members, out.acks, strict=True):
                acks[n] = code
            if out.error is not None:
                raise out.error
            assert out.batch is not None
            return out.batch

        try:
            return AckedClaim(acks, self._claim(capacity, send), None)
        except Exception as exc:
            return AckedClaim(acks, None, exc)

    def _groups(self, job_ids: Sequence[str]) -> dict[int, list[int]]:
        """The positions of ``job_ids``, by shard."""
        groups: dict[int, list[int]] = defaultdict(list)
        for n, job_id in enumerate(job_ids):
            groups[sharding.shard_of(job_id, self.n)].append(n)
        return groups

    def _claim(
        self, capacity: Mapping[str, int], send: Callable[[int, Mapping[str, int]], ClaimBatch]
    ) -> ClaimBatch:
        """``claim_due``'s rounds, ``send(shard, asked)`` claiming from one shard."""
        self.check_namespace(record=True)
        self.shards[0].watch_eviction()  # shard 0 ran check_server: the server's watch
        left = {lane: max(0, int(n)) for lane, n in capacity.items()}
        now = self.clock.now()
        estimates = self._estimates
        claims: list[Claim] = []
        store_now: float | None = None
        failed: list[Exception] = []
        reached = False  # a shard answered: a failed one is tried again later, not raised
        for i in estimates.order(now):
            wanted = frozenset(lane for lane, n in left.items() if n > 0)
            if not wanted:
                break
            woken = estimates.visit(i, wanted, now)
            if woken is None:
                continue
            asked = dict(left)
            try:
                batch = send(i, asked)
            except Exception as exc:  # its node down: the other shards' work goes on
                failed.append(exc)
                estimates.set_aside(i, wanted, now, exc)
                continue
            reached = True
            got = Counter(c.lane for c in batch.claims)
            for lane, k in got.items():
                left[lane] = left.get(lane, 0) - k
            full = {lane for lane in wanted if got[lane] >= min(asked[lane], MAX_BATCH)}
            self._offset_ms = self.shards[i].offset_ms
            estimates.answered(i, batch, wanted, full, woken)
            claims.extend(batch.claims)
            store_now = batch.now if batch.now is not None else store_now
        if failed and not reached:
            raise failed[0]  # no shard answered: the dispatcher backs off and retries
        claims.sort(key=lambda c: c.scheduled)  # stable: FIFO within a shard holds
        # since: the shards' estimates are on this store's clock, read before the first shard
        return ClaimBatch(claims, estimates.next_due_in(left, now), store_now, now)

    def renew(self, claims: Sequence[Claim], lease: float) -> list[Commit]:
        groups = self._groups([c.job_id for c in claims])
        out: list[Commit] = [Commit.LEASE_LOST] * len(claims)
        for i, members in groups.items():
            codes = self.shards[i].renew([claims[n] for n in members], lease)
            for n, code in zip(members, codes, strict=True):
                out[n] = code
        return out

    def complete(self, claim: Claim, result: Any) -> Commit:
        return self.shard(claim.job_id).complete(claim, result)

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        """``RedisStore.complete_many`` per shard (batched acks; base.py); one outcome
        per item, in order."""
        groups = self._groups([c.job_id for c, _ in done])
        out: list[Commit] = [Commit.LEASE_LOST] * len(done)
        for i, members in groups.items():
            codes = self.shards[i].complete_many([done[n] for n in members])
            for n, code in zip(members, codes, strict=True):
                out[n] = code
        return out

    def fail(self, claim: Claim, error: str, retry_in: float | None, traceback: str = "") -> Commit:
        return self.shard(claim.job_id).fail(claim, error, retry_in, traceback)

    def end_interrupted(self, claim: Claim, detail: str) -> Commit:
        return self.shard(claim.job_id).end_interrupted(claim, detail)

    def release(self, claim: Claim) -> Commit:
        return self.shard(claim.job_id).release(claim)

    # ---- inspection -------------------------------------------------------------------------

    def get(self, job_id: str) -> JobInfo | None:
        return self.shard(job_id).get(job_id)

    def watch(self, job_id: str, *args: Any) -> tuple[Outcome | None, Callable[[], None]]:
        return self.shard(job_id).watch(job_id, *args)

    def report_progress(self, claim: Claim, value_json: str) -> Commit:
        return self.shard(claim.job_id).report_progress(claim, value_json)

    def pending_occurrence(self, job_id: str) -> float | None:
        return self.shard(job_id).pending_occurrence(job_id)

    def jobs(self) -> list[JobInfo]:
        """Every live job of every shard (a SCAN per shard: an operator's call)."""
        self.check_namespace()
        return ops.by_next_run(i for s in self.shards for i in s.jobs())

    def events(self, limit: int = 100) -> list[Event]:
        """The most recent ``limit`` events of all shards, oldest first (merged by time;
        equal times keep shard order)."""
        self.check_namespace()
        return ops.merge_events((s.events(limit) for s in self.shards), limit)

    # ---- upkeep: the reconciler and the quarantine, shard by shard -----------------------

    def reconcile(self, *, dry_run: bool = False, start_count: bool = False) -> Reconciled:
        """``RedisStore.reconcile`` on every shard, added up (one live count per shard)."""
        self.check_namespace()
        return upkeep.sum_reconciled(
            [s.reconcile(dry_run=dry_run, start_count=start_count) for s in self.shards]
        )

    def quarantined(self) -> list[Quarantined]:
        self.check_namespace()
        return [q for s in self.shards for q in s.quarantined()]

    def restore(self, entry_id: str) -> str:
        """Restore from the shard that holds the entry (a job's shard first)."""
        first = self.shard(entry_id)
        for s in [first, *(s for s in self.shards if s is not first)]:
            outcome = s.restore(entry_id)
            if outcome != "missing":
                return outcome
        return "missing"

    def purge_quarantined(self, entry_id: str) -> int:
        self.check_namespace()
        return sum(s.purge_quarantined(entry_id) for s in self.shards)

    # ---- wake-ups -----------------------------------------------------------------------

    def _stop_subscriber(self, thread: threading.Thread) -> None:
        super()._stop_subscriber(thread)
        self._estimates.trust(False)

    def _woke(self, i: int, due_ms: int) -> None:
        """A wake-up of shard i: its estimate moves earlier, and the engines are told (Redis
        time converted with the shard's clock offset, or any shard's if it has none yet)."""
        shard = self.shards[i]
        shard.adopt_offset(self._offset_ms)
        due_in = shard.due_in(due_ms)
        self._estimates.learn([i], self.clock.now() + due_in, woken=True)
        self._notify(due_in)

    # one connection subscribed to every shard's wake channel (claiming/wakeups.py); after each
    # (re)connection every shard is swept once

    def _wake_channels(self) -> list[str]:
        return list(self._channel_shard)

    def _on_wake(self, channel: str, due_ms: int) -> None:
        i = self._channel_shard.get(channel)
        if i is not None:
            self._woke(i, due_ms)

    def _on_subscribed(self) -> None:
        self._estimates.trust(True)  # a sweep follows: we may have missed wake-ups

    def _on_lost(self) -> None:
        self._estimates.trust(False)

    def retire(self, owner: str) -> None:
        """Replica ``owner`` stopped: its live key goes from every shard it claimed in."""
        for s in self.shards:
            s.retire(owner)

    def close(self) -> None:
        self._close_subscriptions()
        for shard in self.shards:
            shard.stop_results()
        urls.close(self._r)


def open_store(
    redis_url: str | Any, namespace: str = "default", *, shards: int | None = None, **kwargs: Any
) -> RedisStore | ShardedStore:
    """The store for a URL: a ``RedisStore`` for one shard, else a ``ShardedStore``. The
    shard count is ``shards``, else the URL's ``shards=N``, else 1; both given must agree.
    ``kwargs`` go to the store (``clock``, ``lease``, ``resync``, ``wait_replicas``...)."""
    n = shard_count_for(redis_url, shards)
    if n == 1:
        return RedisStore(redis_url, namespace, **kwargs)
    return ShardedStore(redis_url, namespace, shards=n, **kwargs)
