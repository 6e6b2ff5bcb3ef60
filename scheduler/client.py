"""Client: enqueue, cancel, pause, resume and inspect jobs of a shared store from any
process, without running a dispatcher or any job.

    client = Client("redis://127.0.0.1:6379/0", namespace="prod")
    job_id = client.enqueue("billing.send_invoice", kwargs={"customer": "c1"}, delay=30)
    client.enqueue("billing.report", every=60, job_id="hourly-report")
    client.cancel(job_id)                    # -> bool
    client.enqueue("billing.total", kwargs={"month": 5}).result(timeout=60)  # its value

``enqueue`` returns a ``JobHandle``: the job id (a ``str``, equal to it) that can also wait
for the job's result (scheduler/handles.py, docs/results.md).

Task names need not be registered in the producer: only the replicas run them (and a
replica that does not know a name records the failure with a clear reason). A producer
that does have the task (it imports its module, or passes the function) has the
arguments checked against its signature: a misspelt or missing one is a ``TypeError``
at enqueue, not a failure on a replica.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from scheduler import timeinput, validation
from scheduler import tracing as trace_config
from scheduler.client_flow import FlowControl, checked
from scheduler.errors import ClientClosedError, JobNotFoundError, StoreFullError
from scheduler.handles import JobHandle
from scheduler.model import AddResult, Cron, Event, JobInfo, JobSpec, Quarantined, Reconciled
from scheduler.specs import check_options, epoch, make_spec, schedule_of
from scheduler.stores.base import (
    BulkAdd,
    Closable,
    HasClock,
    Interrupts,
    Outcomes,
    Redo,
    Store,
    Upkeep,
)
from scheduler.stores.redis.integrity.server_checks import not_interrupted

if TYPE_CHECKING:
    from scheduler.stores.redis.reading.listing import Page


class Client(FlowControl):
    """A producer and inspector of one namespace. ``redis_url``: ``redis://``,
    ``rediss://``, ``redis+cluster://host1:7000,host2:7001`` (Redis Cluster) or
    ``redis+sentinel://host1:26379,host2:26379/service[/db]`` (see
    stores/redis/protocol/urls.py), or any ``Store`` (a ``MemoryStore`` shared with engines
    in the same process, for tests). ``shards``: the namespace's shard count
    (stores/redis/sharding/sharded.py; also ``?shards=N`` in the URL; default 1; it must be
    the count the namespace was created with).
    ``wait_replicas``/``wait_timeout_ms``: WAIT after each write until that many Redis
    replicas have it (RedisStore). ``tracing``: each enqueue inside a span stores its trace
    context with the job (OpenTelemetry, the ``otel`` extra; None: ``DUETIME_TRACING``;
    docs/tracing.md)."""

    def __init__(
        self,
        redis_url: str | Store = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "default",
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        shards: int | None = None,
        tracing: bool | None = None,
    ) -> None:
        self._tracing = trace_config.wanted(tracing)
        if isinstance(redis_url, str):
            from scheduler.stores.redis.sharding.sharded import open_store

            self.store: Store = open_store(
                redis_url,
                namespace,
                shards=shards,
                wait_replicas=wait_replicas,
                wait_timeout_ms=wait_timeout_ms,
            )
        elif callable(getattr(redis_url, "claim_due", None)):  # a Store (a Protocol)
            self.store = redis_url
        else:
            raise TypeError(
                "Client() takes a Redis URL (str), such as 'redis://127.0.0.1:6379/0', or a "
                f"Store; got {type(redis_url).__name__} {redis_url!r}"
            )
        self._probed: Store | None = None  # the store _wall last looked at
        self._has_clock = False

    def enqueue(
        self,
        task: str | Callable[..., Any],
        *,
        kwargs: Mapping[str, Any] | None = None,
        delay: float | str | None = None,
        at: dt.datetime | float | None = None,
        every: float | str | None = None,
        anchor: dt.datetime | float | None = None,
        cron: str | Cron | None = None,
        tz: str | None = None,
        job_id: str | None = None,
        allow_past: bool = False,
        **options: Any,
    ) -> JobHandle:
        """Store a job; returns its handle (its id, a ``str``, with ``result()`` and
        ``progress()``: scheduler/handles.py). Give exactly one of ``delay`` (seconds, or a
        duration string such as ``"90s"``, ``"1h30m"``, ``"PT1H"``), ``at`` (aware
        datetime or epoch seconds; in the past: due now, but more than 24 h back is
        refused unless ``allow_past=True``), ``every`` (seconds or a duration string,
        fixed rate from ``anchor``, default now) or ``cron`` (an expression read in
        ``tz``, default UTC, or a ``Cron`` with its daylight-saving policy and jitter).
        With an existing ``job_id`` this is an upsert (equal definition: no-op keeping the
        anchor; changed: replaced atomically). Options as for ``Scheduler.after``: lane,
        timeout, retry, misfire, misfire_grace, catch_up_window, overlap, delivery,
        priority, limit_key (without one, the task's or lane's key rule gives it). On
        return the job is stored and replicas have been woken if it is the earliest; on
        error nothing was written."""
        when = {"delay": delay, "at": at, "every": every, "anchor": anchor, "cron": cron}
        spec = build_spec(
            task,
            when,
            self._wall(),
            tz=tz,
            job_id=job_id,
            kwargs=kwargs,
            allow_past=allow_past,
            options=options,
        )
        if self._tracing:
            self._stored(spec)
        else:
            self.store.add(spec)
        return JobHandle(spec.job_id, self._watch, self._get)

    def handle(self, job_id: str, invocation: float | int | str | None = None) -> JobHandle:
        """A handle of a job stored earlier (by any process): ``result()`` waits for its
        outcome. ``invocation`` names one invocation of a recurring job: its scheduled
        instant (seconds on the store's clock, as ``JobInfo.next_run`` and
        ``Claim.scheduled``) or its id ``"<job>@<ms>"``; without it, a recurring job's
        handle waits for its next invocation to end (docs/results.md)."""
        return JobHandle(validation.job_id(job_id), self._watch, self._get, invocation)

    def _watch(self, *args: Any) -> Any:
        return outcomes_of(self.store).watch(*args)

    def _get(self, job_id: str) -> JobInfo | None:
        return self.store.get(job_id)

    def _stored(self, spec: JobSpec) -> AddResult:
        """``store.add(spec)`` inside an enqueue span (tracing on)."""
        with trace_config.enqueuing((spec,), "enqueue"):
            return self.store.add(spec)

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[JobHandle]:
        """Store many jobs at once; each item holds ``enqueue``'s arguments (``task`` plus
        keywords). Returns their handles (ids) in order. Every item is validated before anything is
        written; a shared store then sends them in one round trip (each add atomic on its
        own)."""
        specs = job_specs(jobs, self._wall())
        if self._tracing:
            with trace_config.enqueuing(specs, "enqueue_many"):
                self._add_many(specs)
        else:
            self._add_many(specs)
        watch, get = self._watch, self._get
        return [JobHandle(spec.job_id, watch, get) for spec in specs]

    def _add_many(self, specs: list[JobSpec]) -> None:
        if isinstance(self.store, BulkAdd):
            self.store.add_many(specs)
        else:
            for spec in specs:
                self.store.add(spec)

    def _wall(self) -> float:
        """Epoch seconds now, on the store's clock if it has one (a test's fake clock)."""
        store = self.store
        if store is not self._probed:  # a Protocol isinstance costs ~6 us: once per store
            self._probed, self._has_clock = store, isinstance(store, HasClock)
        return store.clock.wall() if self._has_clock else time.time()  # type: ignore[attr-defined]

    def cancel(self, job_id: str, *, interrupt: bool = False) -> bool:
        """True iff a future start was prevented (see ``Scheduler.cancel``). A running
        invocation may finish, unless ``interrupt``: then each replica that runs one of
        the job is asked to stop it (its ``current_invocation().cancelled()``; an async
        job's task is cancelled) at its next lease renewal, within a third of the lease
        (shared stores only)."""
        jid, store = validation.job_id(job_id), self.store
        if not interrupt:
            return store.cancel(jid)
        if not isinstance(store, Interrupts):
            raise TypeError(
                "interrupt=True reaches other processes through a shared (Redis) store; "
                "in process, use Scheduler.cancel(job_id, interrupt=True)"
            )
        prevented = store.cancel(jid)
        try:
            store.interrupt(jid)
        except StoreFullError as exc:  # cancel.lua may run on a full Redis, a plain HSET not
            raise not_interrupted(exc, jid) from exc
        return prevented

    def pause(self, job_id: str) -> bool:
        """Stop starting new invocations of the job until ``resume``. True iff it was
        active and is now paused."""
        return self.store.pause(validation.job_id(job_id))

    def resume(self, job_id: str) -> bool:
        """Resume a paused job; occurrences missed meanwhile follow its misfire policy."""
        return self.store.resume(validation.job_id(job_id))

    def trigger(self, job_id: str) -> bool:
        """Run the job once now, outside its schedule (recorded as "triggered"). A recurring
        job gets an extra run and its schedule is unchanged; a one-off job's pending run is
        brought forward to now (it still runs once). False if the job is unknown, finished
        or cancelled, or a one-off that is paused, running or waiting for a retry."""
        return self.store.trigger(validation.job_id(job_id))

    def backfill(self, job_id: str, start: dt.datetime | float, end: dt.datetime | float) -> int:
        """Run the occurrences of a past window [start, end) that never ran (before the
        job existed, or skipped by its misfire or overlap policy), each once, as soon as
        workers are free; occurrences that ran, or that an earlier backfill queued, are
        not run again. Returns how many runs were queued."""
        a, b = backfill_window(start, end)
        return self.store.backfill(validation.job_id(job_id), a, b)

    def get(self, job_id: str) -> JobInfo:
        """A snapshot of the job: state, next run, runs, failures, last result/error,
        running invocations, skipped occurrences, dead letters."""
        info = self.store.get(validation.job_id(job_id))
        if info is None:
            raise JobNotFoundError(job_id)
        return info

    def jobs(self) -> list[JobInfo]:
        return self.store.jobs()

    def events(self, limit: int = 100) -> list[Event]:
        return self.store.events(limit)

    # ---- failed and finished work (a shared store) ----------------------------------------

    def _shared(self) -> Any:
        if not hasattr(self.store, "parts"):
            raise TypeError(
                "list_jobs pages through a shared (Redis) store; in process, jobs() lists "
                "every job with its state"
            )
        return checked(self.store)

    def list_jobs(
        self,
        state: str = "scheduled",
        *,
        task: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        lane: str | None = None,
        prefix: str | None = None,
    ) -> Page:
        """One page of the jobs in ``state``: scheduled, running, paused, failed, dead (with
        dead letters), abandoned, cancelled, succeeded or all; of ``task`` only if given;
        at most ``limit``, after ``cursor`` (a previous page's ``cursor``; None when the
        listing is complete); ``lane`` and an id ``prefix`` filter as ``task`` does.
        Finished jobs are kept for a day. See ``scheduler.stores.redis.reading.listing``."""
        from scheduler.stores.redis.reading import listing

        return listing.list_jobs(
            self._shared(), state, task=task, limit=limit, cursor=cursor, lane=lane, prefix=prefix
        )

    def retry(self, job_id: str) -> int:
        """Queue every dead-lettered invocation of the job again, due now, at attempt 1 (a
        failed one-off is live again); recorded as a ``retried_by_operator`` event.
        Returns how many were queued; raises ``JobNotFoundError`` for an unknown job and
        ``ValueError`` when there is nothing to retry (running, or no dead letter)."""
        return self._redo().retry(validation.job_id(job_id)).count()

    def retry_failed(self, task: str | None = None) -> dict[str, int]:
        """``retry`` every job with dead letters (of ``task`` if given): job id -> how many
        invocations were queued (0: refused meanwhile, e.g. running)."""
        return {r.job_id: r.queued for r in self._redo().retry_failed(task)}

    def delete(self, job_id: str) -> bool:
        """Remove the job and everything it owns (its hash, pending invocations, skips, dead
        letters, backfill record, index entries). A running invocation may finish; its
        outcome is then dropped. False if there was no such job."""
        return self._redo().delete(validation.job_id(job_id))

    def _redo(self) -> Redo:
        if not isinstance(self.store, Redo):
            raise TypeError(f"{type(self.store).__name__} does not retry or delete jobs")
        return checked(self.store)

    # ---- upkeep (a shared store; the in-process store never holds malformed data) -------

    def _upkeep(self) -> Upkeep:
        if not isinstance(self.store, Upkeep):
            raise TypeError("this store keeps no quarantine and needs no reconciler")
        return checked(self.store)

    def quarantined(self) -> list[Quarantined]:
        """What the store moved aside because it did not parse (job data planted or
        edited by hand), oldest first, each with its reason."""
        return self._upkeep().quarantined()

    def restore(self, entry_id: str) -> str:
        """Put a quarantined job back after its data was fixed. Returns ``restored``,
        ``missing``, ``exists`` (a job with that id exists again), ``no-job`` (an entry
        without a job: purge it) or ``still-bad <why>`` (its data still does not parse:
        it stays in the quarantine)."""
        return self._upkeep().restore(validation.job_id(entry_id))

    def purge_quarantined(self, entry_id: str = "*") -> int:
        """Drop a quarantine entry and the data kept with it (default: every entry);
        returns how many were dropped."""
        return self._upkeep().purge_quarantined(
            entry_id if entry_id == "*" else validation.job_id(entry_id)
        )

    def reconcile(self, *, dry_run: bool = False) -> Reconciled:
        """Check every job of the namespace once and repair what a crash or a past bug
        left behind (replicas also do this in the background); ``dry_run`` only reports."""
        return self._upkeep().reconcile(dry_run=dry_run)

    def close(self) -> None:
        """Close the store's connections. Any later use raises ``ClientClosedError``
        (redis-py would reconnect silently, with a connection nobody closes); closing again
        is harmless."""
        if isinstance(self.store, Closable):
            self.store.close()
        self.store = ClosedStore("Client")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- what Client and AsyncClient both do before a store is asked ---------------------------

SCHEDULE_ARGS = ("delay", "at", "every", "anchor", "cron")


def job_spec(
    task: str | Callable[..., Any],
    when: Mapping[str, Any],
    *,
    tz: str | None = None,
    job_id: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    allow_past: bool = False,
    **options: Any,
) -> Callable[[float], JobSpec]:
    """``enqueue``'s validation: given the schedule arguments ``when`` (delay, at, every,
    anchor, cron; none: due now) and the rest, a function of "now" (epoch seconds) that
    returns the job's spec or raises what the caller did wrong."""
    return lambda now: build_spec(
        task, when, now, tz=tz, job_id=job_id, kwargs=kwargs, allow_past=allow_past, options=options
    )


def outcomes_of(store: Store) -> Outcomes:
    """``store`` as an ``Outcomes`` (what a handle waits on), or a ``TypeError``."""
    if not isinstance(store, Outcomes):
        raise TypeError(f"{type(store).__name__} cannot tell a handle a job's outcome")
    return store


class ClosedStore:
    """A closed client's ``store``: every use raises ``ClientClosedError`` for ``kind``
    ("Client", "AsyncClient"); ``close()`` again does nothing."""

    def __init__(self, kind: str) -> None:
        self._kind = kind

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # only for what the instance lacks
        raise ClientClosedError(self._kind)


def build_spec(
    task: str | Callable[..., Any],
    when: Mapping[str, Any],
    now: float,
    *,
    tz: str | None = None,
    job_id: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    allow_past: bool = False,
    options: Mapping[str, Any],
) -> JobSpec:
    """``job_spec(...)(now)``: the job's spec, or what the caller did wrong."""
    delay, at, every, cron = when.get("delay"), when.get("at"), when.get("every"), when.get("cron")
    if delay is None and at is None and every is None and cron is None:
        delay = 0.0
    schedule = schedule_of(
        delay=delay,
        at=at,
        every=every,
        anchor=when.get("anchor"),
        cron=cron,
        tz=tz,
        allow_past=allow_past,
        now=now,
    )
    if options:
        check_options(options, "enqueue")
    return make_spec(task, schedule, job_id=job_id, kwargs=kwargs, check_task=False, **options)


def job_specs(jobs: Iterable[Mapping[str, Any]], now: float) -> list[JobSpec]:
    """``enqueue_many``'s validation: every item's spec (``task`` plus ``enqueue``'s
    keywords), or the first error."""
    specs = []
    for i, given in enumerate(jobs):
        if type(given) is not dict and not isinstance(given, Mapping):  # dict: no ABC check
            raise TypeError(
                f"enqueue_many item {i}: each item is a mapping of enqueue's arguments, "
                f"such as {{'task': 'app.send', 'delay': 30}}; got {type(given).__name__}"
            )
        item = dict(given)
        if "task" not in item:
            raise TypeError(f"enqueue_many item {i}: no 'task' (the registered task's name)")
        task = item.pop("task")
        when = {k: item.pop(k, None) for k in SCHEDULE_ARGS}
        try:
            spec = build_spec(
                task,
                when,
                now,
                tz=item.pop("tz", None),
                job_id=item.pop("job_id", None),
                kwargs=item.pop("kwargs", None),
                allow_past=item.pop("allow_past", False),
                options=item,
            )
        except (TypeError, ValueError) as exc:  # say which item (same type, same text after)
            if len(exc.args) == 1 and isinstance(exc.args[0], str):
                exc.args = (f"enqueue_many item {i}: {exc.args[0]}",)
            raise
        specs.append(spec)
    return specs


def backfill_window(start: dt.datetime | float, end: dt.datetime | float) -> tuple[float, float]:
    """``backfill``'s window as epoch seconds; ValueError if it is empty."""
    a, b = epoch(start, "start"), epoch(end, "end")
    if b <= a:
        raise ValueError(
            f"backfill window is empty: end ({timeinput.iso_utc(b)}) must be after start "
            f"({timeinput.iso_utc(a)})"
        )
    return a, b
