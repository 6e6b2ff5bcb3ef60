"""The engine: one store, one dispatcher loop, lanes of workers, and the richer API.

``Scheduler`` is what ``JobScheduler`` and ``RecurringJobScheduler`` are thin layers over.
It is also the composition root: the only place (with the CLI) where ``scheduler`` meets
``workers``."""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from scheduler import spans, tasks, timeinput, validation
from scheduler.client import Client
from scheduler.clock import Clock, MonotonicClock
from scheduler.dispatcher import Dispatcher
from scheduler.errors import SchedulerClosedError
from scheduler.lane import Lane
from scheduler.metrics import Metrics
from scheduler.model import After, At, Claim, Cron, Every, InvocationInfo, Schedule
from scheduler.readout import Lag
from scheduler.specs import JobTarget, check_options, cron_schedule, epoch, make_spec
from scheduler.stores.base import (
    AcksWithClaims,
    BatchAcks,
    HasClock,
    Interrupts,
    Retiring,
    ServerChecks,
    ServesTasks,
    Store,
)
from scheduler.stores.memory import MemoryStore
from workers import processes
from workers.acks import Acks
from workers.context import INTERRUPTED
from workers.handoff import Work, works
from workers.heartbeat import Heartbeat
from workers.lanes import Lanes
from workers.runner import Runner
from workers.timers import Timers

log = logging.getLogger("duetime")

LOOKAHEAD = 0.02  # seconds of work a lane may claim beyond its free workers (batched stores)
# the latest a success waits for a claim to carry it (AcksWithClaims) before its own flush
ACK_RIDE_DELAY = 0.025


class Scheduler(Client):
    """A scheduler engine over a store: a ``Client`` that also runs the jobs.

    ``num_workers`` threads serve the ``"default"`` lane; ``lanes`` adds named lanes with
    their own sizes (a job names its lane). ``lease`` is the claim lease (default: the
    store's; ``None`` for the in-process store, whose owner cannot die without it).
    ``lane_timeouts`` gives a default timeout per lane. All methods are thread-safe and
    may be called from inside a running job.

    Over a store that commits in batches (``complete_many``: the Redis store), successes
    are acknowledged in batches and each lane claims, beyond its free workers, what they
    will finish within ``lookahead`` seconds at their recent pace (short jobs only; at
    most 100 per lane), so a burst is claimed ~50 per store call instead of one by one.
    ``lookahead=0`` claims only for free workers. ``tracing``: a span per invocation and
    per enqueue (OpenTelemetry, the ``otel`` extra; None: ``DUETIME_TRACING``; docs/tracing.md).
    """

    def __init__(
        self,
        num_workers: int = 4,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        lanes: Mapping[str, int | Lane] | None = None,
        lane_timeouts: Mapping[str, float | str] | None = None,
        lease: float | None | Literal["store"] = "store",
        rng: random.Random | None = None,
        resync: float | None = None,
        owner: str | None = None,
        metrics: Metrics | None = None,
        lookahead: float = LOOKAHEAD,
        tracing: bool | None = None,
    ) -> None:
        self.clock: Clock = clock or (
            store.clock if isinstance(store, HasClock) else MonotonicClock()
        )
        super().__init__(store if store is not None else MemoryStore(self.clock), tracing=tracing)
        self.owner = uuid.uuid4().hex[:12] if owner is None else validation.name(owner, "owner")
        resync = validation.optional_positive(resync, "resync")  # 0 or nan spun the dispatcher
        if isinstance(self.store, ServerChecks):
            self.store.check_server()  # a shared store refuses a server that breaks them
        if isinstance(self.store, ServesTasks):
            self.store.serve(tasks.served)  # never claim a job whose task is not registered here
        self._lease = self.store.default_lease if lease == "store" else lease
        if self._lease is not None:
            self._lease = validation.interval(self._lease, "lease")
        sizes, process = validation.lanes(num_workers, lanes)  # process: Lane of each such lane
        timeouts = validation.lane_timeouts(lane_timeouts or {}, sizes)
        self._processes = processes.build(process, self.owner, tasks.resolve, self._tracing)
        with processes.closed_on_error(self._processes):  # none left behind
            self._closed = False
            self._close_lock = threading.Lock()
            self._timers = Timers(self.clock)
            self.metrics = metrics or Metrics()
            acks = self._acks = self._build_runner(timeouts, rng)
            self._dispatcher = Dispatcher(
                self.store,
                self.clock,
                capacity=lambda: self._lanes.capacity(),
                submit=self._submit,
                lease=self._lease,
                owner=self.owner,
                resync=resync if resync is not None else getattr(self.store, "resync", None),
                rng=rng,
                metrics=self.metrics,
                acks=acks,  # successes ride with claims, if the store takes them (AcksWithClaims)
            )
            wiring = processes.lane_options(self._processes, self._runner.run)  # on_exit, runs
            if acks is None:  # a store without batches: a free worker refills itself
                self._lanes: Lanes[Work] = Lanes(
                    sizes,
                    self._runner.run,
                    self._dispatcher.poke_capacity,
                    self._refill,
                    **wiring,
                )
            else:  # batched: the dispatcher claims whole batches (look-ahead)
                self._lanes = Lanes(
                    sizes,
                    self._runner.run,
                    self._dispatcher.poke_capacity,
                    lookahead=validation.delay(lookahead, "lookahead"),
                    on_idle=self._idle_rides if self._dispatcher.rides else acks.flush,
                    # in process a flush is cheap: a worker about to sleep leaves nothing unrecorded
                    on_drained=acks.flush if isinstance(self.store, MemoryStore) else None,
                    **wiring,  # a worker thread's event loop and process, if any, end with it
                )
            self._unsubscribe = self.store.subscribe(self._dispatcher.poke_if_earlier)
            self._poke_on_add = not isinstance(self.store, MemoryStore)
            self._dispatcher.start()

    def _build_runner(
        self, timeouts: Mapping[str, float], rng: random.Random | None
    ) -> Acks | None:
        """The runner with its lease heartbeat (a store with leases) and batched acks (a
        store with ``BatchAcks``); returns the acks, or None."""
        heartbeat = (
            None
            if self._lease is None
            else Heartbeat(self.store, self._timers, self._lease, self.metrics, self.owner)
        )
        acks = (
            None
            if not isinstance(self.store, BatchAcks)
            else Acks(
                self.store.complete_many,
                self._timers,
                # the runner settles the heartbeat's claims and reports the successes
                on_recorded=lambda claims, results: self._runner.recorded(claims, results),
                # a success waits up to this for a claim to carry it, then for its own call
                max_delay=ACK_RIDE_DELAY if isinstance(self.store, AcksWithClaims) else 0.002,
                # in process, workers flush when they drain their queue: the deadline
                # timer is armed only when a job starts while successes wait
                arm_on_add=not isinstance(self.store, MemoryStore),
            )
        )
        self._runner = Runner(
            self.store,
            self.clock,
            self._timers,
            processes.resolver(self._processes, tasks.resolve),  # process lanes: their call
            heartbeat=heartbeat,
            lane_timeouts=timeouts,
            rng=rng,
            metrics=self.metrics,
            owner=self.owner,
            acks=acks,
            on_retry=lambda due_in: self._dispatcher.poke_if_earlier(due_in),
            tracer=spans.tracer_for(self._tracing, self.owner, self.clock, self.store),
        )
        return acks

    def _idle_rides(self) -> None:
        """A lane's last busy worker finished (acks ride with claims): the successes
        waiting go with the claim round that its freed slot starts or that is due within
        ``ACK_RIDE_DELAY``, else in a flush now (``wait_idle`` flushes and waits for them)."""
        if not self._dispatcher.claim_follows(ACK_RIDE_DELAY):
            self._runner.flush_acks()

    def _submit(self, claims: Sequence[Claim], claimed_at: float) -> None:
        """Hand a claimed batch to its lanes: one hand-off (and wake-up) per lane, in
        claim order (FIFO among jobs due at the same instant)."""
        lane = claims[0].lane
        if all(c.lane == lane for c in claims):
            self._lanes.submit_many(lane, works(claims, claimed_at))
            return
        by_lane: dict[str, list[Work]] = {}
        for c in claims:
            by_lane.setdefault(c.lane, []).append(Work(c, claimed_at))
        for name, items in by_lane.items():
            self._lanes.submit_many(name, items)

    def _refill(self, lane: str) -> Work | None:
        """A worker of ``lane`` just finished: if due work was left waiting for a free
        worker, claim the next one for this worker (it is free, so this claims only what
        can start now). Otherwise the dispatcher is told the worker is free."""
        if self._closed or not self._dispatcher.starved:
            return None
        asked = self.clock.now()  # the lease starts before the reply arrives
        batch = self.store.claim_due({lane: 1}, self._lease, self.owner)
        if not batch.claims:
            return None
        self._dispatcher.record(batch)
        return Work(batch.claims[0], asked)

    # ---- scheduling -------------------------------------------------------------------

    def after(self, fn: JobTarget, delay: float | str, **options: Any) -> str:
        """Run ``fn`` once, ``delay`` seconds from now (or a duration string: ``"90s"``,
        ``"1h30m"``, ``"PT1H"``). Returns the job id.

        On return the job is in the store (linearization point: the store's ``add``) and
        every dispatcher that should wake for it has been notified."""
        return self._add(fn, After(validation.delay(delay, "delay")), **options)

    def at(
        self,
        fn: JobTarget,
        when: dt.datetime | float,
        *,
        allow_past: bool = False,
        **options: Any,
    ) -> str:
        """Run ``fn`` once at ``when`` (an aware datetime, or epoch seconds). A time in
        the past runs as soon as possible; one more than 24 h in the past is refused
        (``ValueError``, likely a mistake) unless ``allow_past=True``."""
        t = epoch(when, "when")
        timeinput.check_past(t, self.clock.wall(), "when", allow_past, "allow_past=True")
        return self._add(fn, At(t), **options)

    def every(
        self,
        fn: JobTarget,
        interval: float | str,
        *,
        anchor: dt.datetime | float | None = None,
        **options: Any,
    ) -> str:
        """Run ``fn`` at every grid point ``anchor + k*interval`` (k >= 0) that lies after
        this call (``interval``: seconds, or a duration string); ``anchor`` defaults to
        now, so the first run is one interval away.
        With an existing ``job_id`` this is an upsert: an equal definition is a no-op that
        keeps the anchor; a changed one replaces the job atomically."""
        iv = validation.recurrence(interval, "interval")
        a = None if anchor is None else epoch(anchor, "anchor")
        return self._add(fn, Every(iv, a), **options)

    def cron(
        self, fn: JobTarget, cron: str | Cron, *, tz: str | None = None, **options: Any
    ) -> str:
        """Run ``fn`` at every occurrence of a calendar schedule after this call: a cron
        expression read in the IANA zone ``tz`` (default UTC), or a ``Cron`` carrying its
        daylight-saving policy and jitter. Upsert semantics as for ``every``."""
        return self._add(fn, cron_schedule(cron, tz), **options)

    def _add(
        self, fn: JobTarget, schedule: Schedule, *, job_id: str | None = None, **options: Any
    ) -> str:
        if options:
            check_options(options, "schedule")
        spec = make_spec(fn, schedule, job_id=job_id, check_task=True, **options)
        processes.check(self._processes, spec.lane, spec.target)  # a callable cannot cross
        if spec.lane not in self._lanes:
            raise ValueError(
                f"unknown lane {spec.lane!r}; this scheduler has lanes "
                f"{self._lanes.names()} (pass lanes={{...}} to create one)"
            )
        if self._closed:
            raise SchedulerClosedError()
        added = self._stored(spec) if self._tracing else self.store.add(spec)
        if self._poke_on_add:
            # our own dispatcher learns at once (a shared store's wake-up is asynchronous;
            # a MemoryStore's add has called every subscriber, ours too, before returning)
            self._dispatcher.poke_if_earlier(added.due_in)
        return spec.job_id

    def next_id(self) -> int:
        return self.store.next_id()

    # ---- control ----------------------------------------------------------------------

    def cancel(
        self,
        job_id: str,
        *,
        wait: bool = False,
        timeout: float | None = None,
        interrupt: bool = False,
    ) -> bool:
        """Remove the job: no invocation of it starts after this returns (linearization
        point: the store's ``cancel``). True iff that prevented at least one start. A
        running invocation is not stopped; ``interrupt=True`` asks it to stop
        (``current_invocation().cancelled()``), here at once and, in a shared store, on
        the other replicas at their next lease renewal; ``wait=True`` waits for the
        invocations running in this process to end."""
        prevented = self.store.cancel(validation.job_id(job_id))
        # claimed ahead but not started here: handed back (the store drops them, the job
        # being cancelled), so no invocation starts after this returns
        for work in self._lanes.remove(lambda w: w.claim.job_id == job_id):
            self.store.release(work.claim)
            prevented = True
        if interrupt:
            self._runner.cancel_running(job_id, INTERRUPTED)
            if isinstance(self.store, Interrupts):  # and on the other replicas
                self.store.interrupt(job_id)
        if wait:
            self._runner.wait_job(job_id, timeout)
        return prevented

    def resume(self, job_id: str) -> bool:
        resumed = super().resume(job_id)
        if resumed:
            self._dispatcher.poke()
        return resumed

    def trigger(self, job_id: str) -> bool:
        triggered = super().trigger(job_id)
        if triggered:
            self._dispatcher.poke()
        return triggered

    def backfill(self, job_id: str, start: dt.datetime | float, end: dt.datetime | float) -> int:
        queued = super().backfill(job_id, start, end)
        if queued:
            self._dispatcher.poke()
        return queued

    # pause, get, jobs, events: inherited from Client

    def running(self) -> list[InvocationInfo]:
        return [inv for info in self.store.jobs() for inv in info.running]

    def loop_lag(self) -> Lag:
        """Over the recent ``async def`` jobs (up to 5,000): how long each one's code kept
        its event loop from running callbacks, in seconds (p50, p90, p99, max). Blocking
        code inside an ``async def`` (``time.sleep``, a sync client, CPU work) cannot be
        pre-empted: it shows here; await instead, or make the job a plain ``def``."""
        return Lag.of(list(self._runner.loop_lags))

    def lane_load(self) -> dict[str, tuple[int, int]]:
        """Per lane: its workers, and the invocations running on them or handed to them."""
        return self._lanes.load()

    def wait_idle(self, timeout: float | None = 10.0) -> bool:
        """Block until nothing is due now, nothing runs and no wake-up is pending (for
        tests, with a ``FakeClock``: advance, then ``wait_idle``). False on timeout."""
        acks = self._acks
        for _ in range(1000):
            rounds = self._dispatcher.rounds
            flushed = acks.flushed if acks is not None else 0
            if not (
                self._dispatcher.wait_quiet(timeout)
                and self._lanes.wait_idle(timeout)
                and self._dispatcher.wait_quiet(timeout)
            ):
                return False
            if rounds == self._dispatcher.rounds and self._lanes.busy() == 0:
                # recorded too: successes waiting for a claim, or in flight with one
                if acks is None:
                    return True
                if not acks.recorded(timeout):
                    return False
                if acks.flushed == flushed:
                    return True
                # a success recorded on its own may have released work due now (a
                # queued occurrence), whose wake-up message comes later: claim once more
                self._dispatcher.poke()
        return False

    # ---- lifecycle ----------------------------------------------------------------------

    async def serve(self, *, shutdown_timeout: float | None = 30.0, exiting: bool = False) -> None:
        """Run this engine inside an asyncio program until the task awaiting this is
        cancelled; cancellation is the shutdown of docs/guarantees.md (stop claiming, hand unstarted
        claims back, let running jobs finish up to ``shutdown_timeout``), done off the
        event loop, after which the ``CancelledError`` propagates. The engine's workers
        are threads: the loop is never blocked by jobs. ``exiting``: the program ends
        when this returns, so the leases of jobs still running at the timeout end now
        and other replicas run them again at once (``shutdown(exiting=True)``, as
        ``duetime run`` does), not a lease later.

            task = asyncio.create_task(Scheduler(4, store=store).serve())
            ...
            task.cancel()  # a clean stop"""
        import asyncio

        shutdown_timeout = validation.wait_limit(shutdown_timeout, "shutdown_timeout")
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            await asyncio.shield(
                asyncio.to_thread(
                    self.shutdown, wait=True, timeout=shutdown_timeout, exiting=exiting
                )
            )

    def shutdown(
        self, wait: bool = True, timeout: float | None = None, *, exiting: bool = False
    ) -> None:
        """Stop claiming, hand claimed-but-unstarted invocations back to the store at once,
        and (``wait``) let running jobs finish, up to ``timeout`` seconds in all (None or
        ``math.inf``: no limit). Idempotent; safe from inside a job (that job's own thread
        is not waited for). Pending jobs stay in the store. Jobs still running when
        ``timeout`` passes keep running (threads cannot be stopped) and keep their leases,
        unless ``exiting``: this process ends right after (``duetime run``), so their
        leases end now and other replicas run them again at once, as after a crash
        (attempt+1), instead of a lease later."""
        timeout = validation.wait_limit(timeout, "timeout")  # refused: nothing changes
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        each_step(  # every step runs whatever the ones before it raised
            self._unsubscribe,
            self._dispatcher.close,
            lambda: self._runner.release_unstarted(self._lanes.close()),
            lambda: self._wind_down(wait, timeout, exiting),
            self._retire,
            lambda: processes.close(self._processes),  # the worker processes no thread holds
        )

    def _wind_down(self, wait: bool, timeout: float | None, exiting: bool) -> None:
        """Commit what finished; with ``wait``, wait for running jobs up to ``timeout``."""
        if not wait:
            self._runner.flush_acks()
        elif self._lanes.join(timeout):
            self._runner.flush_acks()
            self._timers.close()
        else:
            running, handed = self._stop_waiting(hand_back=exiting)
            if running:  # 0: the idle threads were just slow to exit
                log.warning(
                    "shutdown: %d job(s) still running after %gs%s",
                    running,
                    timeout,
                    f"; {handed} lease(s) handed back: other replicas run them again"
                    if handed
                    else "",
                )

    def abandon(self) -> tuple[int, int]:
        """For a process about to exit while ``shutdown`` still waits for running jobs (a
        second SIGTERM/SIGINT to ``duetime run``), from another thread: record what
        finished, end the leases of the jobs still running (other replicas run them
        again, attempt+1, as after a crash) and leave the live replicas. Returns (jobs
        still running, leases handed back)."""
        running, handed = self._stop_waiting(hand_back=True)
        self._retire()
        return running, handed

    def _stop_waiting(self, *, hand_back: bool) -> tuple[int, int]:
        self._runner.flush_acks()  # what finished while the others ran
        running = self._lanes.busy()
        return running, (self._runner.hand_back() if hand_back and running else 0)

    def _retire(self) -> None:
        """Leave the store's live replicas at once (no claim follows: the dispatcher is
        closed and workers refill only while open); a dead replica's entry expires."""
        if isinstance(self.store, Retiring):
            try:
                self.store.retire(self.owner)
            except Exception as exc:  # unreachable: the entry expires on its own
                log.warning("shutdown: could not leave the live replicas (%s)", exc)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def each_step(*steps: Callable[[], object]) -> None:
    """Run every step, whatever the ones before it raised; then raise the first error."""
    errors: list[Exception] = []
    for step in steps:
        try:
            step()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
