"""RedisStore: the shared store. Each method is one Lua script call (lua/*.lua), so each
is atomic in Redis; Redis ``TIME`` judges "due" and lease expiry, so replicas' clocks do
not matter.

Wake-ups: a script that makes a job the earliest of its lane publishes its due time on
the namespace's wake channel; every replica's subscriber thread pokes its dispatcher.
Pub/sub drops messages while a connection is down, so dispatchers also resync (claim)
every ``resync`` seconds (jittered), and a reconnected subscriber pokes at once.

Failover (``redis+sentinel://``, protocol/urls.py): see integrity/replication.py for WAIT
and loss detection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from scheduler import validation
from scheduler.clock import Clock, MonotonicClock
from scheduler.errors import (
    StoreConfigError,
    StoreCorruptError,
    StoreFullError,
    StoreUnavailableError,
)
from scheduler.model import AddResult, Claim, ClaimBatch, Commit, Event, JobInfo, JobSpec, Retried
from scheduler.stores.base import AckedClaim
from scheduler.stores.redis import adds, ops, redo, rulebook
from scheduler.stores.redis.claiming import acked_claims, calendar_plans, presence
from scheduler.stores.redis.claiming import claim_reply as claimcodec
from scheduler.stores.redis.claiming.wakeups import WakeSubscriptions
from scheduler.stores.redis.flow_methods import FlowMethods
from scheduler.stores.redis.integrity import upkeep
from scheduler.stores.redis.integrity.checks import CheckMethods
from scheduler.stores.redis.integrity.replication import ReplicationWatch, Waiter
from scheduler.stores.redis.integrity.server_checks import (
    UNREACHABLE,
    EvictionCheck,
    refused,
    unreachable,
)
from scheduler.stores.redis.protocol import (
    definitions,
    gateway,
    records,
    requests,
    script_args,
    urls,
)
from scheduler.stores.redis.protocol import scripts as lua
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.reading import lane_queues
from scheduler.stores.redis.results import ResultMethods
from scheduler.stores.redis.sharding import shards

__all__ = [
    "RedisStore",
    "StoreConfigError",
    "StoreCorruptError",
    "StoreFullError",
    "StoreUnavailableError",
]

log = logging.getLogger("duetime.redis")

LIVE = ops.LIVE  # finished jobs stay a day, but are not listed
RESEND_RETRIES = 2  # reconnect-and-resend attempts after a connection error
MAX_BATCH = 100  # claims per lane per script call: keeps each call well under 1 ms of Redis
MAX_ACKS = 200  # completions per complete_many call (same bound on one call's Redis time)
PLAN_ROUNDS = 3  # claims one claim_due makes while calendar plans make occurrences due


class RedisStore(WakeSubscriptions, CheckMethods, FlowMethods, upkeep.UpkeepMethods, ResultMethods):
    """A namespace of jobs (or shard i of N: ``shard=(i, N)``, sharding/sharded.py) in one Redis or
    cluster slot. ``redis_url``: a URL (``redis://``, ``rediss://``, ``redis+sentinel://``,
    ``redis+cluster://``: protocol/urls.py) or a redis-py client. ``wait_replicas``: WAIT after each
    write (integrity/replication.py). ``clock``: tests only, its time replaces Redis ``TIME``."""

    def __init__(
        self,
        redis_url: str | Any = "redis://127.0.0.1:6379/0",
        namespace: str = "default",
        *,
        clock: Clock | None = None,
        lease: float = 30.0,
        resync: float = 5.0,
        shard: tuple[int, int] = (0, 1),
        payload_limit: int = validation.DEFAULT_PAYLOAD_LIMIT,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
    ) -> None:
        import redis  # the optional dependency: the "redis" extra (README, Install)

        self._redis_mod = redis
        self._r: Any  # redis.Redis with decode_responses=True
        if isinstance(redis_url, str):
            # a pooled connection left dead by an outage or a restart is reconnected and
            # its command resent (scripts are idempotent on resend: claims carry a
            # request id, commits a token) instead of failing the caller
            self._r = urls.connect(
                redis_url, decode_responses=True, **urls.resend_policy(RESEND_RETRIES)
            )
        else:
            self._r = redis_url
        self.url = urls.safe(redis_url)
        self.keys = Keys(namespace, *shard)  # shard (i, of N): sharding/sharded.py's
        self._route = [self.keys.epoch]  # KEYS[1]: routes every script call in a cluster
        self.namespace = namespace
        self.default_lease: float | None = validation.interval(lease, "lease")
        self.resync = resync
        self.payload_limit = payload_limit
        self.clock: Clock = clock or MonotonicClock()
        self._fixed_clock = clock is not None
        self._scripts = {name: lua.sendable(name) for name in lua.SCRIPTS}
        self._definitions = claimcodec.Definitions()
        self.rules = rulebook.RuleCache()  # the key rules this store's adds apply (adds.py)
        self._offset_ms = 0.0  # Redis time minus local monotonic time, in ms
        self._epoch: str | None = None  # the namespace's epoch, once known
        self._checked: list[str] | None = None  # check_server() warnings, once checked
        self._counted = False  # the namespace's shard count checked before a first add
        self._eviction = EvictionCheck()  # a producer's cached check of the policy
        self.data_loss_alarms = 0
        self._upkeep_at = 0.0  # monotonic time of the next reconciler pass (integrity/upkeep.py)
        # claim request ids: this store's random prefix and a count (claim.lua keeps the
        # last reply per owner, so an id need only differ from the owner's previous ones).
        # Not a uuid4 per claim: os.urandom lets go of the GIL, and a dispatcher that
        # waits to get it back while workers run holds up its claim round.
        self._request_ids = map(f"{uuid.uuid4().hex[:16]}-{{}}".format, itertools.count())
        self._serves: Callable[[], tuple[int, Sequence[str]]] | None = None
        self._served: tuple[int | None, str] = (None, "*")  # (version, claim.lua's ARGV[6])
        self._init_subscriptions()
        self.waiter = Waiter(self._r, wait_replicas, wait_timeout_ms)
        self.replication = ReplicationWatch(self._r, self.url, self.keys.prefix, self.record_event)
        self.replication.cause = self.loss_cause
        self._evicted: int | None = None  # eviction watch (integrity/checks.py): check_server's
        self._policy = "noeviction"
        self._eviction_at = 0.0
        self._eviction_cause: str | None = None

    @property
    def parts(self) -> list[RedisStore]:
        """The stores that hold the namespace's data: ``[self]`` (a ``ShardedStore``
        answers its shards), so read-side queries treat both kinds alike."""
        return [self]

    def shard(self, job_id: str) -> RedisStore:
        """The store that holds ``job_id``: this one (see ``ShardedStore.shard``)."""
        return self

    @property
    def redis(self) -> Any:
        """The redis-py client (decode_responses=True), for read-only inspection."""
        return self._r

    # ---- plumbing ------------------------------------------------------------------------

    def _now_arg(self) -> str:
        return script_args.ms(self.clock.now()) if self._fixed_clock else ""

    @contextlib.contextmanager
    def reachable(self) -> Iterator[None]:
        """Turn a lost or refused connection into a StoreUnavailableError that says what
        to check (the URL is shown without its password)."""
        try:
            yield
        except UNREACHABLE as exc:
            raise unreachable(exc, self.url) from exc

    def call_script(self, name: str, *args: Any) -> Any:
        """Run script ``name`` (lua/) with the namespace's prefix and time argument, then
        ``args``; its reply. Bad input refused by the script raises ValueError; a
        namespace key of the wrong type, ``StoreCorruptError`` (logged at most once a
        minute per key)."""
        argv = [self.keys.prefix, self._now_arg(), *args]  # script_args.head, inlined
        try:
            self.replication.refresh()
            if self.waiter.replicas:
                trip = gateway.Trip([(self._scripts[name], argv)], self._route, self.waiter.wait())
                return gateway.run(self._r, trip)[0]
            return gateway.call(self._r, self._scripts[name], self._route, argv)
        except UNREACHABLE as exc:  # first: it holds redis-py's out-of-memory ResponseError
            raise unreachable(exc, self.url) from exc
        except self._redis_mod.ResponseError as exc:
            raise refused(exc, self.url) from exc

    def call_scripts(self, *calls: tuple[str, Sequence[Any]], writes: int = 0) -> list[Any]:
        """``call_script`` for each ``(name, args)``, in order, in one round trip (then WAIT
        with ``wait_replicas``, counting ``writes`` writes, or one per call): the replies,
        an error reply as its exception, not raised (protocol/gateway.py: every script sent must be
        safe to resend)."""
        head = script_args.head(self.keys.prefix, self.clock.now() if self._fixed_clock else None)
        wait = self.waiter.wait(writes or len(calls))
        sent = [(self._scripts[name], head + list(args)) for name, args in calls]
        with self.reachable():
            self.replication.refresh()
            return gateway.run(self._r, gateway.Trip(sent, self._route, wait, raises=False))

    def spec_of(self, job_id: str, text: str) -> JobSpec:
        """The ``JobSpec`` of a stored definition (decoded once per distinct text, cached:
        claiming/claim_reply.py)."""
        return self._definitions.spec(job_id, text)

    # ---- producers -------------------------------------------------------------------------

    def next_id(self) -> int:
        with self.reachable():
            return int(self._r.incr(self.keys.ids))

    def add(self, spec: JobSpec) -> AddResult:
        """``add_many`` of one job (``adds.add_one``: the same steps without the request
        machinery, which ``add_many`` takes when the cached key rules cannot judge it)."""
        self._writable()
        return adds.add_one(self, spec) or self.add_many([spec])[0]

    def add_many(self, specs: Sequence[JobSpec]) -> list[AddResult]:
        """``add`` for many jobs in one round trip (add.lua calls of ``adds.ADD_BATCH`` jobs
        each, all checked first); each add is atomic, the batch is not (one refused raises).
        Key rules apply to each (adds.py: the cached rules, reloaded when add.lua finds
        them stale)."""
        self._writable()
        return requests.run_on(self, adds.add(self.keys, specs, self.payload_limit, self.rules))

    def send_adds(self, args: Sequence[list[Any]], stamp: str | None) -> list[Any]:
        """``requests.Adds`` on this store: add.lua for ``args``, one item per job."""
        return adds.send(self, args, stamp)

    def check_namespace(self, record: bool = False) -> None:
        """The shard count and data layout checked until settled (sharding/shards.py; a newer
        layout, misread if read: ``LayoutRefusedError``); writers ``record`` a new count."""
        if not self._counted:  # a sharded namespace (another count) would not find the job
            with self.reachable():
                self._counted = shards.check_count(self._r, self.keys, self.url, record=record)

    def _writable(self) -> None:
        self.check_namespace(record=True)
        if self._eviction.due():  # an evicting Redis would lose the job: refused
            with self.reachable():
                self._eviction.check(self._r, self.url)

    def _add_args(self, spec: JobSpec) -> list[Any]:
        """add.lua's arguments for ``spec`` as it is (no key rule applied; tests)."""
        self._writable()
        return definitions.add_args(spec, self.payload_limit, self._redis_now_ms)

    def redis_now_ms(self) -> int:
        return self._redis_now_ms()

    def _redis_now_ms(self) -> int:
        """The scripts' "now": the test clock if one was given, else Redis TIME."""
        if self._fixed_clock:
            return round(self.clock.now() * 1000)
        with self.reachable():
            sec, usec = self._r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per lane: pending invocations, and how many are due now (``QueueDepths``)."""
        with self.reachable():
            now = self._redis_now_ms()
            return lane_queues.depths(self, now)

    # the producer's and inspector's operations are ops.py's, shared with AsyncClient

    def cancel(self, job_id: str) -> bool:
        return requests.run(self, ops.cancel(self.keys, job_id))

    def interrupt(self, job_id: str) -> int:
        return requests.run(self, ops.interrupt(self.keys, job_id))

    def interrupted(self, job_ids: Collection[str]) -> set[str]:
        return requests.run(self, ops.interrupted(self.keys, job_ids))

    def pause(self, job_id: str) -> bool:
        return requests.run(self, ops.pause(self.keys, job_id))

    def resume(self, job_id: str) -> bool:
        return requests.run(self, ops.resume(self.keys, job_id))

    def trigger(self, job_id: str) -> bool:
        return requests.run(self, ops.trigger(self.keys, job_id))

    def backfill(self, job_id: str, start: float, end: float) -> int:
        return requests.run(self, ops.backfill(self.keys, job_id, start, end))

    # ---- an operator's redo (``Redo``, base.py; redo.py) ---------------------------------

    def retry(self, job_id: str) -> Retried:
        return redo.retry(self, job_id)

    def retry_failed(self, task: str | None = None) -> list[Retried]:
        return redo.retry_failed(self, task)

    def delete(self, job_id: str) -> bool:
        return redo.delete(self, job_id)

    # ---- the dispatcher's side ----------------------------------------------------------

    def claim_due(self, capacity: Mapping[str, int], lease: float | None, owner: str) -> ClaimBatch:
        request = self.claim_request(capacity, lease, owner)
        return self.claimed(self.call_script("claim", *request.argv), request)

    def complete_and_claim(
        self,
        done: Sequence[tuple[Claim, Any]],
        capacity: Mapping[str, int],
        lease: float | None,
        owner: str,
    ) -> AckedClaim:
        """``complete_many(done)`` then ``claim_due(...)`` in one round trip
        (``AcksWithClaims``, base.py; claiming/acked_claims.py)."""
        return acked_claims.complete_and_claim(self, done, capacity, lease, owner, MAX_ACKS)

    def serve(self, tasks: Callable[[], tuple[int, Sequence[str]]] | None) -> None:
        """Claim only invocations of the tasks ``tasks()`` names (a version that changes
        when the names do, and the names; ``scheduler.tasks.served``), read at every claim;
        None: every task (``ServesTasks``, base.py)."""
        self._serves = tasks
        self._served = (None, "*")

    def _served_arg(self) -> str:
        if self._serves is None:
            return "*"
        version, names = self._serves()
        if version != self._served[0]:
            self._served = (version, records.served_text(names))
        return self._served[1]

    def claim_request(
        self,
        capacity: Mapping[str, int],
        lease: float | None,
        owner: str,
        prior: tuple[int, ...] = (),
    ) -> acked_claims.ClaimRequest:
        """claim.lua's arguments after the prefix and time (a fresh request id; ``prior``, the
        fences the claim's earlier calls were handed), and what ``claimed`` needs to read
        its reply; runs the reconciler first when it is due."""
        if time.monotonic() >= self._upkeep_at:
            self._upkeep()
        self.watch_eviction()  # a clock read, and INFO every REPLICA_CHECK_S seconds
        request_id, served = next(self._request_ids), self._served_arg()
        argv = script_args.claim(owner, request_id, lease, served, prior, capacity, MAX_BATCH)
        sent, high = time.monotonic(), self.replication.fence_high
        return acked_claims.ClaimRequest(
            argv, dict(capacity), owner, sent, high, lease, prior=prior
        )

    def claimed(self, text: str, request: acked_claims.ClaimRequest) -> ClaimBatch:
        """The batch of claim.lua's reply ``text`` to ``request``: claims built, malformed
        ones moved aside, lost claims detected, calendar plans written."""
        capacity, owner, sent, high = request.capacity, request.owner, request.sent, request.high
        reply = claimcodec.claim_reply(text)
        now = reply.now
        self._offset_ms = now + reply.now_us / 1000 - sent * 1000
        alarms = self.data_loss_alarms
        self._watch_epoch(reply.epoch)
        with self.reachable():
            self.replication.after_claim(
                high,
                reply.fence,
                [c[3] for c in reply.claims],
                reported=self.data_loss_alarms > alarms,
            )
        claims, bad = claimcodec.build(reply, owner, self._definitions.spec)  # = spec_of
        for job, token, exc in bad:
            self._quarantine(job, token, exc)
        # never raises: the claims above must still be returned
        replanned = calendar_plans.write_plans(self, reply.plans, now) if reply.plans else []
        nxt = reply.next
        # from Redis's time to the µs: "now" alone is rounded down, which made every wake
        # for a due time up to 1 ms late (0.5 ms on average)
        due_in = None if nxt < 0 else max(0.0, (nxt - now) / 1000 - reply.now_us / 1e6)
        capped = [lane for lane, n in capacity.items() if n > MAX_BATCH]
        if capped and claimcodec.took_a_full_batch(claims, capped, MAX_BATCH):
            due_in = 0.0  # a lane took a full batch and has room for more: ask again now
        if bad:
            due_in = 0.0  # the capacity those claims took is free again: ask again now
        batch = ClaimBatch(claims, due_in, now / 1000, now / 1000 if self._fixed_clock else None)
        if replanned and request.round + 1 < PLAN_ROUNDS:
            at = dict(zip(reply.plans, reply.plan_at, strict=True))
            return self._claim_planned(batch, request, {j: at[j] for j in replanned})
        return batch

    def _claim_planned(
        self, batch: ClaimBatch, request: acked_claims.ClaimRequest, at: dict[str, int]
    ) -> ClaimBatch:
        """``batch`` and a second claim for what its calendar plans made due now (a cron
        series back from a gap starts in the claim that planned it, as in process;
        docs/guarantees.md, "Misfires"), each in the place its plan took (``at``); that one
        may plan in turn: at most ``PLAN_ROUNDS`` claims in all."""
        rest = dict(request.capacity)
        for c in batch.claims:
            rest[c.lane] -= 1
        if not any(n > 0 for n in rest.values()):
            return dataclasses.replace(batch, next_due_in=0.0)  # full: claimed next
        prior = request.prior + tuple(c.fence for c in batch.claims)  # lua/include/defer.lua
        again = self.claim_request(rest, request.lease, request.owner, prior)
        again = again._replace(round=request.round + 1)
        more = self.claimed(self.call_script("claim", *again.argv), again)
        claims = calendar_plans.in_place(batch.claims, more.claims, at)
        return dataclasses.replace(more, claims=claims)

    def _quarantine(self, job: str, token: str, exc: Exception) -> None:
        """A claimed job whose definition cannot be read: moved aside, into the
        namespace's quarantine (quarantine.lua drops the claim's RUNNING entry and lease,
        renames the job key and records why), instead of crashing the loop."""
        reason = f"malformed job data in Redis ({type(exc).__name__}: {exc})"
        log.error("job %s: %s; moved aside (quarantined)", job, reason)
        self.call_script("quarantine", *script_args.quarantine(job, token, reason))

    def renew(self, claims: Sequence[Claim], lease: float) -> list[Commit]:
        if not claims:
            return []
        codes = self.call_script("renew", *script_args.renew(lease, [c.token for c in claims]))
        return acked_claims.commits(codes)

    def complete(self, claim: Claim, result: Any) -> Commit:
        args = script_args.complete(claim.job_id, claim.token, records.result_json(result))
        return Commit(self.call_script("complete", *args))

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        """``complete`` for a batch of (claim, result), ``MAX_ACKS`` per script call (batched
        acks): each item is token-checked on its own and gets its own outcome, in order."""
        return acked_claims.complete_many(self, done, MAX_ACKS)

    def fail(self, claim: Claim, error: str, retry_in: float | None, traceback: str = "") -> Commit:
        args = script_args.fail(claim.job_id, claim.token, error, retry_in, traceback)
        return Commit(self.call_script("fail", *args))

    def end_interrupted(self, claim: Claim, detail: str) -> Commit:
        args = script_args.fail(claim.job_id, claim.token, detail, None, interrupted=True)
        return Commit(self.call_script("fail", *args))

    def release(self, claim: Claim) -> Commit:
        return Commit(self.call_script("release", *script_args.release(claim.job_id, claim.token)))

    # ---- inspection -------------------------------------------------------------------------

    def get(self, job_id: str) -> JobInfo | None:
        self.check_namespace()
        return requests.run(self, ops.get(self.keys, job_id))

    def pending_occurrence(self, job_id: str) -> float | None:
        return requests.run(self, ops.pending_occurrence(self.keys, job_id))

    def jobs(self) -> list[JobInfo]:
        """Every live job (a SCAN of the namespace's job keys: an operator's call, not a
        hot path)."""
        self.check_namespace()
        return requests.run(self, ops.jobs(self.keys))

    def events(self, limit: int = 100) -> list[Event]:
        self.check_namespace()
        return requests.run(self, ops.events(self.keys, limit))

    # ---- wake-ups -----------------------------------------------------------------------

    @property
    def offset_ms(self) -> float:
        """Redis time minus local monotonic time in ms, as the last claim measured it."""
        return self._offset_ms

    def adopt_offset(self, offset_ms: float) -> None:
        """Until this store has measured Redis time itself (its first claim), convert
        Redis times with ``offset_ms`` (Redis minus local ms) measured by another."""
        if not self._offset_ms and not self._fixed_clock:
            self._offset_ms = offset_ms

    def due_in(self, due_ms: int) -> float:
        """Seconds from now until Redis time ``due_ms`` (0 if past)."""
        now = (
            self.clock.now() * 1000
            if self._fixed_clock
            else time.monotonic() * 1000 + self._offset_ms
        )
        return max(0.0, (due_ms - now) / 1000)

    def _wake_channels(self) -> list[str]:
        return [self.keys.wake]

    def _on_wake(self, channel: str, due_ms: int) -> None:
        self._notify(self.due_in(due_ms))

    def retire(self, owner: str) -> None:
        """Replica ``owner`` stopped: it leaves the live set at once (claiming/presence.py)."""
        presence.retire(self, owner)

    def close(self) -> None:
        self._close_subscriptions()
        self.stop_results()
        urls.close(self._r)
