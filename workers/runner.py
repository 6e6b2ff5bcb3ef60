"""Run one claimed invocation: check the lease, call the job, record the outcome.

Failure isolation: whatever the job raises is caught, logged with job id, invocation and
traceback, and recorded through the store (retry or dead-letter); the worker goes on.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler import validation
from scheduler.clock import Clock
from scheduler.errors import InvocationCancelled, InvocationTimeout, TaskNotRegisteredError
from scheduler.metrics import Metrics, Run
from scheduler.model import Claim, Commit, Target, TaskRef
from scheduler.stores.base import Store
from workers import commits, coroutines, failpoints, failures
from workers.acks import Acks
from workers.calls import AsyncFlags
from workers.context import CURRENT, INTERRUPTED, CancelToken, InvocationContext, log_fields
from workers.coroutines import loops as _loops
from workers.handoff import Ran, Work
from workers.heartbeat import Heartbeat
from workers.progress import ProgressReports
from workers.retry import retry_delay
from workers.timers import Timers
from workers.traced import InvocationTracer, OpenSpans

log = logging.getLogger("duetime.workers")

UNKNOWN_TASK_ATTEMPTS = 5


_new_record = tuple.__new__  # a NamedTuple from all its fields, in order: a frame less
LOOP_LAGS = 5000  # recent async jobs whose loop lag ``Scheduler.loop_lag()`` covers


def task_label(claim: Claim) -> str:
    """The task of a claim as a metrics label: its registered name, or ``callable`` for an
    in-process callable (a closure or lambda has no stable name; labels stay few: only
    invocations that ran are labelled, and those name tasks registered here)."""
    target = claim.spec.target
    return target.name if isinstance(target, TaskRef) else "callable"


class Runner:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        timers: Timers,
        resolve: Callable[[Target], Callable[[], Any]],
        *,
        heartbeat: Heartbeat | None = None,
        lane_timeouts: Mapping[str, float | None] | None = None,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
        owner: str = "",
        acks: Acks | None = None,
        on_retry: Callable[[float], None] | None = None,
        tracer: InvocationTracer | None = None,
    ) -> None:
        """``acks``: commit successes in batches through it (stores with
        ``complete_many``); without it each success is one ``complete`` call.
        ``on_retry(due_in)`` is called (before the worker counts as free) after an
        invocation was handed back to run again in ``due_in`` seconds, so the engine's own
        dispatcher learns at once (a shared store's wake-up is asynchronous).
        ``tracer``: a span per invocation (scheduler/spans.py; None: tracing off)."""
        self._tracer = tracer
        self._spans = OpenSpans()  # each invocation's span, until its outcome is recorded
        self._store = store
        self._acks = acks
        self._on_retry = on_retry
        self._clock = clock
        self._timers = timers
        self._reports = ProgressReports(store, timers)  # current_invocation().progress()
        self._resolve = resolve
        self._heartbeat = heartbeat
        self._lane_timeouts = dict(lane_timeouts or {})
        self._rng = rng or random.Random()
        self._metrics = metrics or Metrics()
        # the per-run figures are skipped when the metrics ignore them (the default)
        kind = type(self._metrics)
        self._counts = (
            kind.finished is not Metrics.finished
            or kind.ran is not Metrics.ran
            or kind.succeeded_many is not Metrics.succeeded_many
        )
        self._lag_hooked = (
            kind.loop_lag is not Metrics.loop_lag or kind.loop_lag_many is not Metrics.loop_lag_many
        )
        # with batched acks, successes are reported to the metrics by the flush that recorded
        # them (``recorded``); set and popped by any thread without a lock (single dict
        # operations are atomic)
        self._successes: dict[str, Run] = {}  # claim token -> its run, until its ack flushes
        self._is_async = AsyncFlags()
        self._owner = owner
        self._active_lock = threading.Lock()
        self._active_done = threading.Condition(self._active_lock)
        self._waiters = 0
        # token -> job id of each invocation running here; set and deleted without the lock
        # (single dict operations), which only waiters (``wait_job``) take
        self._active: dict[CancelToken, str] = {}
        self.loop_lags: deque[float] = deque(maxlen=LOOP_LAGS)  # async jobs' loop lag, recent
        # (lane, loop lag) of async successes, reported to the metrics per flush (a
        # failure's is reported at once)
        self._lags: deque[tuple[str, float]] = deque()

    # ---- running jobs, by job id (cancel with wait, cooperative cancel) -----------------

    def cancel_running(self, job_id: str, reason: str) -> int:
        """Ask every running invocation of ``job_id`` to stop. Returns how many."""
        tokens = [t for t, j in self._active.copy().items() if j == job_id]
        for t in tokens:
            t.cancel(reason)
        return len(tokens)

    def wait_job(self, job_id: str, timeout: float | None) -> bool:
        """Block until no invocation of ``job_id`` runs here. False on timeout."""
        with self._active_lock:
            self._waiters += 1
            try:
                return self._active_done.wait_for(
                    lambda: job_id not in self._active.copy().values(), timeout
                )
            finally:
                self._waiters -= 1

    def _untrack(self, token: CancelToken) -> None:
        del self._active[token]
        if self._waiters:  # read after the delete: a waiter that missed it is notified
            with self._active_lock:
                self._active_done.notify_all()

    # ---- one invocation ---------------------------------------------------------------

    def run(self, work: Work) -> None:
        claim = work.claim
        failpoints.hit("after_claim")
        if (claim.start_within is not None or claim.lease_until is not None) and not (
            self._may_start(work)
        ):
            return
        try:
            fn = self._resolve(claim.spec.target)
        except TaskNotRegisteredError as exc:
            self._unknown_task(claim, str(exc))
            return
        except (ValueError, TypeError) as exc:  # arguments that do not parse
            self._malformed(claim, exc)
            return
        is_coroutine = self._is_async(fn)
        token = CancelToken()
        timeout = claim.spec.timeout
        if timeout is None:
            timeout = self._lane_timeouts.get(claim.lane)
        timer = (
            None
            if timeout is None
            else self._timers.call_later(timeout, lambda: token.cancel("timeout"))
        )
        # InvocationContext(...), without its Python-level __new__
        head = (claim.job_id, claim.scheduled_ms, claim.attempt, claim.fence, claim.lane, token)
        ctx = _new_record(InvocationContext, (*head, claim, self._reports))
        self._active[token] = claim.job_id
        # a first attempt's start is routine (DEBUG); a later one is a retry or a takeover
        level = logging.DEBUG if claim.attempt == 1 else logging.INFO
        if log.isEnabledFor(level):
            self._log_started(claim, level)
        if self._heartbeat is not None and claim.lease_until is not None:
            self._heartbeat.hold(claim, token)
        if self._acks is not None:
            self._acks.starting()  # successes queued so far do not wait for this job
        error: BaseException | None = None
        result: Any = None
        span = None if self._tracer is None else self._spans.start(self._tracer, claim, token)
        cv = CURRENT.set(ctx)
        started = self._clock.now()
        try:
            if is_coroutine:  # on this thread's loop, as a task named after the job
                loop = _loops.loop
                result = loop.run_job(fn, token, claim.job_id)
            else:
                result = coroutines.call(fn)
        except BaseException as exc:  # isolate everything, even SystemExit, from the worker
            error = exc
        finally:
            asked = token.reason  # why it was asked to stop before it ended, if it was
            ran = _new_record(Ran, (started - work.claimed_at, self._clock.now() - started))
            CURRENT.reset(cv)
            if timer is not None:
                self._timers.cancel(timer)
            self._untrack(token)
        if is_coroutine:
            lag = loop.lag  # how long its code kept its loop from running callbacks
            self.loop_lags.append(lag)
            if token.reason is not None and not isinstance(error, Exception):
                error = _why_cancelled(token.reason, timeout, error)  # CancelledError, swallowed
            if self._lag_hooked:  # the metrics record loop lags
                if error is None and self._acks is not None:
                    self._lags.append((claim.lane, lag))  # reported with its ack's flush
                else:
                    self._metrics.loop_lag(claim.lane, lag)
        elif asked == INTERRUPTED and error is None:  # interrupted, like an async one
            error = _returned_when_interrupted()
        if span is not None:  # no longer current here; the outcome is known, not recorded
            self._spans.finished(span, error, token.reason)
        queued = False
        try:  # the lease is renewed until the outcome is recorded (a slow commit keeps it)
            if self._heartbeat is not None:
                self._heartbeat.finishing(claim)
            failpoints.hit("after_effect")
            queued = self._finish(claim, token, timeout, error, result, ran)
        finally:
            if self._heartbeat is not None and not queued:
                self._heartbeat.drop(claim)  # a queued ack is settled once recorded

    def _may_start(self, work: Work) -> bool:
        """A claim its rate counted starts within ``start_within`` of its request, or is
        handed back unstarted (its start still counted: docs/flow-control.md#limits); any
        claim starts only with its lease still held."""
        claim, within = work.claim, work.claim.start_within
        if within is not None and self._clock.now() - work.claimed_at > within:
            log.info("invocation %s: late for its rate's window, handed back", claim.invocation_id)
            self._metrics.finished(claim.lane, "late")
            self._commit(claim, lambda: self._store.release(claim))
            return False
        if claim.lease_until is not None and not self._lease_still_held(work):
            self._lost_before_start(claim)
            return False
        return True

    def _lost_before_start(self, claim: Claim) -> None:
        if self._tracer is not None:
            self._tracer.lost_before_start(claim)
        msg = "lease lost before start, not running job %s invocation %s"
        log.warning(msg, claim.job_id, claim.invocation_id)
        self._metrics.finished(claim.lane, "lease_lost")

    def _log_started(self, claim: Claim, level: int) -> None:
        log.log(
            level,
            "job %s invocation %s attempt %d started",
            claim.job_id,
            claim.invocation_id,
            claim.attempt,
            extra=self._fields(claim, "started"),
        )

    def _finish(
        self,
        claim: Claim,
        token: CancelToken,
        timeout: float | None,
        error: BaseException | None,
        result: Any,
        ran: Ran,
    ) -> bool:
        """Record the outcome; True if it was queued for a batched ack instead."""
        if error is None and token.reason == "timeout":
            error = InvocationTimeout(f"job ran past its timeout of {timeout:g}s")
        elif error is None and result is not None:  # not JSON: a failure (docs/results.md)
            error = validation.result_problem(result)
        if error is None:
            # reported to the metrics once the store recorded it (a refused one is a lost
            # lease): by this commit, or by the flush of its batched ack (``recorded``)
            run = Run(claim.lane, task_label(claim), ran.took, ran.waited) if self._counts else None
            if run is not None and self._acks is not None:
                self._successes[claim.token] = run
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "job %s invocation %s attempt %d succeeded",
                    claim.job_id,
                    claim.invocation_id,
                    claim.attempt,
                    extra=self._fields(claim, "succeeded"),
                )
            if self._acks is not None:
                self._acks.add(claim, result)
                return True
            committed = self._commit(claim, lambda: self._store.complete(claim, result))
            if run is not None and committed is Commit.OK:
                self._metrics.succeeded_many((run,))
        elif isinstance(error, InvocationCancelled) and token.reason == INTERRUPTED:
            self._record_interrupt(claim, str(error), ran)
        else:
            self._record_failure(claim, error, ran)
        return False

    def recorded(self, claims: Sequence[Claim], results: Sequence[Commit] | None) -> None:
        """A flush of batched acks ended (``Acks(on_recorded=...)``): the heartbeat stops
        renewing those claims and judges refusals; the successes so far are reported to
        the metrics in one call."""
        if self._heartbeat is not None:
            self._heartbeat.settled_many(claims, results)
        if self._spans:
            self._spans.ended(claims, results)
        if self._successes:
            self._report_successes(claims, results)
        if self._lags:
            lags = []
            pop_lag = self._lags.popleft
            try:
                for _ in range(len(self._lags)):
                    lags.append(pop_lag())
            except IndexError:
                pass
            if lags:
                self._metrics.loop_lag_many(lags)

    def _report_successes(self, claims: Sequence[Claim], results: Sequence[Commit] | None) -> None:
        """Report to the metrics the successes this flush recorded: a success the store
        refused (its lease was lost: the heartbeat reports that) or whose write was given
        up is not one. Each flush takes its own claims' runs (single dict operations, safe
        beside a concurrent flush without a lock)."""
        take = self._successes.pop
        if results is None:
            for claim in claims:
                take(claim.token, None)
            return
        runs = []
        for claim, result in zip(claims, results, strict=True):
            run = take(claim.token, None)
            if run is not None and result is Commit.OK:
                runs.append(run)
        if runs:
            self._metrics.succeeded_many(runs)

    def hand_back(self) -> int:
        """End the leases of the jobs still running (``Heartbeat.hand_back``); 0 without
        leases."""
        return 0 if self._heartbeat is None else self._heartbeat.hand_back()

    def release_unstarted(self, unstarted: Sequence[Work]) -> None:
        """Release claimed-but-unstarted invocations (others run them now). A failing store
        is not asked again: the rest run when their leases end."""
        for i, work in enumerate(unstarted):
            try:
                self._store.release(work.claim)
            except Exception as exc:
                log.warning(
                    "shutdown: could not hand back %d claimed invocation(s) (%s); they run "
                    "again when their leases end",
                    len(unstarted) - i,
                    exc,
                )
                return

    def flush_acks(self) -> None:
        """Commit the successes still queued for a batched ack (no-op without batching)."""
        if self._acks is not None:
            self._acks.flush()

    def _unknown_task(self, claim: Claim, reason: str) -> None:
        """A task this process does not know: hand the invocation back with a growing
        delay, and fail it for good after UNKNOWN_TASK_ATTEMPTS attempts (never retried
        forever). A shared store never hands a replica a task it lacks (task-aware claims,
        docs/guarantees.md): this is the in-process store's path (a ``Client`` over it
        naming a task the process has not registered)."""
        retry_in = (
            None
            if claim.attempt >= UNKNOWN_TASK_ATTEMPTS
            else min(60.0, 0.5 * 2 ** (claim.attempt - 1))
        )
        log.error(
            "job %s invocation %s attempt %d: %s (%s)",
            claim.job_id,
            claim.invocation_id,
            claim.attempt,
            reason,
            "failed" if retry_in is None else f"handed back for {retry_in:g}s",
        )
        self._metrics.finished(claim.lane, "unknown_task")
        self._commit(claim, lambda: self._store.fail(claim, reason, retry_in))
        self._retrying(retry_in)

    def _malformed(self, claim: Claim, exc: Exception) -> None:
        """Job data that cannot become a call: failed for good at once (retrying cannot
        help, and holding the claim would only cost its lease)."""
        reason = f"malformed job data ({failures.text(exc)}); not run"
        log.error("job %s invocation %s: %s", claim.job_id, claim.invocation_id, reason)
        self._metrics.finished(claim.lane, "failed")
        self._commit(claim, lambda: self._store.fail(claim, reason, None))

    def _record_failure(self, claim: Claim, error: BaseException, ran: Ran) -> None:
        retry_in = retry_delay(claim.spec.retry, claim.attempt, self._rng)
        reason, tb = failures.text(error), failures.trace(error)
        log.log(
            logging.ERROR if retry_in is None else logging.WARNING,
            "job %s invocation %s attempt %d failed (%s): %s\n%s",
            claim.job_id,
            claim.invocation_id,
            claim.attempt,
            "dead-lettered" if retry_in is None else f"retry in {retry_in:.3g}s",
            reason,
            tb,
            extra=self._fields(claim, "failed" if retry_in is None else "retried"),
        )
        outcome = (
            "timeout"
            if isinstance(error, InvocationTimeout)
            else ("failed" if retry_in is None else "retried")
        )
        self._metrics.finished(claim.lane, outcome)
        self._metrics.ran(claim.lane, task_label(claim), outcome, ran.took, ran.waited)
        self._commit(claim, lambda: self._store.fail(claim, reason, retry_in, tb))
        self._retrying(retry_in)

    def _record_interrupt(self, claim: Claim, detail: str, ran: Ran) -> None:
        """An operator's interrupt (``cancel(interrupt=True)``) ended the job: its job is
        cancelled already, so the invocation ends without a retry or a dead letter; not a
        failure (INFO), recorded as interrupted."""
        log.info(
            "job %s invocation %s attempt %d interrupted: %s",
            claim.job_id,
            claim.invocation_id,
            claim.attempt,
            detail,
            extra=self._fields(claim, "interrupted"),
        )
        self._metrics.finished(claim.lane, "interrupted")
        self._metrics.ran(claim.lane, task_label(claim), "interrupted", ran.took, ran.waited)
        self._commit(claim, lambda: self._store.end_interrupted(claim, detail))

    def _retrying(self, retry_in: float | None) -> None:
        if retry_in is not None and self._on_retry is not None:
            self._on_retry(retry_in)

    def _fields(self, claim: Claim, event: str) -> dict[str, Any]:
        return log_fields(claim, event, self._owner)

    def _lease_still_held(self, work: Work) -> bool:
        """Do not start a job whose lease may be gone: renew first if it waited long."""
        hb = self._heartbeat
        if hb is None or work.claim.lease_until is None:
            return True
        if self._clock.now() - work.claimed_at < hb.lease / 2:
            return True
        return hb.renew_one(work.claim)

    def _commit(self, claim: Claim, write: Callable[[], Commit]) -> Commit | None:
        """Record the outcome (retried a few times; see workers.commits); the store's
        answer, None if the write was given up."""
        result = commits.record(claim.invocation_id, write)
        if self._heartbeat is not None:
            self._heartbeat.settled(claim, result)  # a refusal is a lost lease: reported once
        if self._spans:
            self._spans.ended((claim,), (result,) if result is not None else None)
        if result is not None and result is not Commit.OK:
            commits.refused(claim, result)
        return result


def _why_cancelled(
    reason: str, timeout: float | None, error: BaseException | None
) -> BaseException:
    """What an async job cancelled by its token ended as (never a success): ``error`` is
    its ``CancelledError``, or None if it swallowed it and returned."""
    if reason == "timeout":
        return InvocationTimeout(f"job ran past its timeout of {timeout:g}s")
    if reason == INTERRUPTED:
        swallowed = "; it returned after its CancelledError: not a success" if error is None else ""
        return InvocationCancelled(f"interrupted by cancel(interrupt=True){swallowed}")
    return InvocationCancelled(f"the async job was cancelled ({reason})")


def _returned_when_interrupted() -> InvocationCancelled:
    """What a sync job that returned after an interrupt cancelled its token ended as: not
    a success (issue 31; a timeout stays a failure: ``Runner._finish``)."""
    return InvocationCancelled(
        "interrupted by cancel(interrupt=True); it returned after its token was "
        "cancelled: not a success"
    )
