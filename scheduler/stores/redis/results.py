"""Results on a shared store: a handle's wait for a job's outcome, and progress reports.

A handle *watches* a job (docs/results.md): its watch joins this process's one results
subscriber (a thread per store, subscribed to the namespace's ``results`` channel), then
``register`` adds the job to the ``waits`` zset (score: until when it waits, ms) and
reads the stored outcome once (a one-off's from its job hash, a recurring invocation's
from ``res:<job>@<ms>``), in one pipeline. A commit of a job in ``waits`` publishes its
end (lua/include/told.lua), which the subscriber hands to the watches it matches. Either
the commit ran before the registration (the read sees it) or after (it sees the
registration and publishes to a subscriber already listening): no end is missed. After
a lost connection the subscriber reads every watch's outcome again (messages sent while
it was away are lost). At rest there is no traffic: a blocked read on one connection.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.errors import JobNotFoundError
from scheduler.model import Claim, Commit, Outcome
from scheduler.stores.redis.protocol import records, requests, script_args, urls
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Calls, Now, Op

log = logging.getLogger("duetime.redis")

JOB_FIELDS = ("kind", "state", "last_result", "last_error", "cancelled", "running")
CLOSED = "closed"  # an outcome that is none: the client closed while its handle waited


def parse(text: str) -> tuple[str, Outcome] | None:
    """A ``results`` message (``<state>|<sched ms>|<job>\\n<payload>``, or a kept
    ``res:`` value) as (job id, outcome); None if it is not one."""
    head, sep, payload = text.partition("\n")
    state, _, rest = head.partition("|")
    sched, _, job = rest.partition("|")
    if not sep or not job or not (sched == "" or sched.isdigit()):
        return None
    ms = int(sched) if sched else None
    if state == "succeeded":
        return job, Outcome(job, ms, state, _decoded(payload))
    return job, Outcome.ended(job, ms, state, payload)


def _decoded(text: str | None) -> Any:
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return text  # written by hand, or by an older version: as stored


def stored(job_id: str, ms: int | None, fields: list[Any], kept: str | None) -> Outcome | None:
    """The outcome a handle reads: the job's hash fields (``JOB_FIELDS``) and the kept
    ``res:`` value of its invocation ``ms``; None while it has not ended."""
    kind, state, result, error, cancelled, running = fields
    if kind is None:
        raise JobNotFoundError(job_id)
    idle = not running or running == "0"
    if kind in ("every", "cron"):
        told = None if kept is None else parse(kept)
        if told is not None:
            return told[1]
        return Outcome(job_id, None, "cancelled") if cancelled == "1" and idle else None
    if state == "succeeded":
        return Outcome(job_id, None, state, _decoded(result))
    if state in ("failed", "abandoned"):
        return Outcome.ended(job_id, None, state, error or "")
    if state == "cancelled" or (cancelled == "1" and idle):
        return Outcome(job_id, None, "cancelled")
    return None


def register(keys: Keys, job_id: str, ms: int | None, hold: float) -> Op[Outcome | None]:
    """Wait for ``job_id``'s invocation ``ms`` (None: its one, or a recurring job's next
    end) for ``hold`` seconds, then read its outcome. The ``waits`` member is the job, or
    ``<job>@<ms>`` for a named invocation: a commit that tells its waiters removes it
    (told.lua), and so does a read that finds the outcome already stored (nothing would)."""
    now = yield Now(keys.shard)
    member = job_id if ms is None else f"{job_id}@{ms}"
    calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...] = (
        ("zremrangebyscore", (keys.waits, "-inf", now - 1), {}),  # handles that gave up
        ("zadd", (keys.waits, {member: now + round(hold * 1000)}), {"gt": True}),
        ("hmget", (keys.job(job_id), *records.job_fields(JOB_FIELDS)), {}),
    )
    if ms is not None:
        calls += (("get", (keys.result(member),), {}),)
    replies = yield Calls(keys.shard, calls)
    fields = records.job_row(JOB_FIELDS, replies[2])
    kept = replies[3] if ms is not None else None
    gone = fields[0] is None  # no such job: its registration goes too
    found = None if gone else stored(job_id, ms, fields, kept)
    if found is None and not gone:
        return None  # it waits: a commit tells it
    yield Calls(keys.shard, (("zrem", (keys.waits, member), {}),))
    if gone:
        raise JobNotFoundError(job_id)
    return found


@dataclass(eq=False)
class Watch:
    job_id: str
    ms: int | None
    deliver: Callable[[Outcome], None]
    recheck: Callable[[], Any]  # read the stored outcome again (async: a coroutine)
    told: bool = False


class Watches:
    """The watches of one process on one namespace part, by job; thread-safe. Each is
    delivered at most once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: dict[str, list[Watch]] = {}

    def add(self, w: Watch) -> None:
        with self._lock:
            self._by_job.setdefault(w.job_id, []).append(w)

    def remove(self, w: Watch) -> None:
        with self._lock:
            ws = self._by_job.get(w.job_id)
            if ws and w in ws:
                ws.remove(w)
                if not ws:
                    del self._by_job[w.job_id]

    def tell(self, job_id: str, outcome: Outcome) -> None:
        """A message: deliver it to the watches of ``job_id`` it ends."""
        with self._lock:
            ws = self._by_job.get(job_id, [])
            hit = [w for w in ws if w.ms is None or outcome.scheduled_ms in (None, w.ms)]
        for w in hit:
            self.deliver(w, outcome)

    def deliver(self, w: Watch, outcome: Outcome) -> None:
        with self._lock:
            if w.told:
                return
            w.told = True
        self.remove(w)
        w.deliver(outcome)

    def all(self) -> list[Watch]:
        with self._lock:
            return [w for ws in self._by_job.values() for w in ws]

    def close(self) -> None:
        """The store is closing: every waiting handle raises ``ClientClosedError``."""
        for w in self.all():
            self.deliver(w, Outcome(w.job_id, w.ms, CLOSED))


def on_message(watches: Watches, data: str) -> None:
    got = parse(data)
    if got is not None:
        watches.tell(*got)


def recheck_all(watches: Watches) -> None:
    """After a (re)subscription: read each watch's outcome again (messages sent while the
    subscriber was away are lost)."""
    for w in watches.all():
        try:
            outcome = w.recheck()
        except Exception as exc:  # noqa: BLE001 - the next reconnection tries again
            log.debug("results: re-reading %s failed: %s", w.job_id, exc)
            continue
        if outcome is not None:
            watches.deliver(w, outcome)


class ResultSubscriber:
    """The results subscriber thread of one ``RedisStore`` (started by the first watch,
    stopped with the store), reconnecting with a capped backoff like wakeups.py."""

    def __init__(self, client: Any, channel: str, name: str) -> None:
        self._r, self._channel = client, channel
        self.watches = Watches()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._pubsub: Any = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float = 5.0) -> None:
        if not self._ready.wait(timeout):
            raise ConnectionError("the results channel could not be subscribed in 5 s")

    def _run(self) -> None:
        backoff = 0.05
        while not self._stop.is_set():
            pubsub = self._pubsub = self._r.pubsub()
            try:
                pubsub.subscribe(self._channel)
                msg = None
                while msg is None or msg.get("type") != "subscribe":
                    if self._stop.is_set():
                        return
                    msg = pubsub.get_message(timeout=1.0)
                if self._ready.is_set():
                    recheck_all(self.watches)  # a reconnection: what was missed is stored
                self._ready.set()
                backoff = 0.05
                while not self._stop.is_set():
                    msg = pubsub.get_message(timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        on_message(self.watches, msg["data"])
                    elif urls.primary_moved(self._r, pubsub.connection):
                        raise ConnectionError("the primary changed (failover): resubscribing")
            except Exception as exc:  # noqa: BLE001 - reconnect, then read every watch again
                if self._stop.is_set():
                    return
                log.warning("results channel lost (%s); reconnecting in %.2fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(5.0, backoff * 2)
            finally:
                try:
                    pubsub.close()
                except Exception:  # noqa: BLE001
                    pass

    def stop(self) -> None:
        self._stop.set()
        self.watches.close()
        pubsub = self._pubsub
        if pubsub is not None and pubsub.connection is not None:
            try:  # wake the blocked read at once
                pubsub.connection.disconnect()
            except Exception:  # noqa: BLE001
                pass
        self._thread.join(5)


class ResultMethods:
    """``Outcomes`` and ``ReportsProgress`` (stores/base.py) of a ``RedisStore``, mixed in."""

    keys: Keys
    namespace: str
    _r: Any
    _results: ResultSubscriber | None = None
    _results_lock = threading.Lock()

    def call_script(self, name: str, *args: Any) -> Any:
        raise NotImplementedError

    def watch(
        self,
        job_id: str,
        scheduled_ms: int | None,
        deliver: Callable[[Outcome], None],
        hold: float = 3600.0,
    ) -> tuple[Outcome | None, Callable[[], None]]:
        with self._results_lock:
            sub = self._results
            if sub is None:
                sub = self._results = ResultSubscriber(
                    self._r, self.keys.results, f"duetime-results-{self.namespace}"
                )
        sub.wait_ready()

        def read() -> Outcome | None:
            return requests.run(self, register(self.keys, job_id, scheduled_ms, hold))  # type: ignore[arg-type]

        w = Watch(job_id, scheduled_ms, deliver, read)
        sub.watches.add(w)  # first listen, then register and read: no end missed
        try:
            known = read()
        except BaseException:
            sub.watches.remove(w)
            raise
        if known is not None:
            sub.watches.remove(w)
            return known, nothing
        return None, lambda: sub.watches.remove(w)

    def report_progress(self, claim: Claim, value_json: str) -> Commit:
        args = script_args.progress(claim.job_id, claim.token, claim.scheduled_ms, value_json)
        return Commit(self.call_script("progress", *args))

    def stop_results(self) -> None:
        """Stop the results subscriber (the store is closing)."""
        with self._results_lock:
            sub, self._results = self._results, None
        if sub is not None:
            sub.stop()


def nothing() -> None:
    """A watch that needs no stopping."""
