"""Each Lua script's ARGV, packed in one place: reading this module tells how every
lua/*.lua script is called (its header in lua/ says what each argument means and what it
answers). The values are computed elsewhere (protocol/definitions.py encodes a job,
claiming/calendar_plans.py plans a series, the store picks a lease); the order they are
sent in is decided here.

Every script's ARGV[1] is the namespace's (shard's) key prefix and ARGV[2] the time in
epoch ms, "" for Redis's ``TIME`` (a test store's fixed clock otherwise): ``head``, which
the store puts before the arguments packed below (``RedisStore.call_script``,
``AsyncStore``). KEYS is the one routing key of the namespace (protocol/gateway.py). The functions
below pack ARGV[3..], in order; each answers a fresh list of strings and numbers. The one
exception is fenced.lua (``scripts.CALLER_KEYS``), which writes the caller's own keys:
``fenced`` packs its whole ARGV.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.stores.base import TRACEBACK_MAX

ERROR_MAX = 4000  # characters of a failure's error message kept
REASON_MAX = 1000  # characters of a quarantine's reason kept
ADD_BATCH = 50  # jobs per add.lua call: ~1 ms of Redis at most (~17 us a job)


def ms(seconds: float) -> str:
    """Seconds as the scripts' whole milliseconds (rounded to nearest)."""
    return str(round(seconds * 1000))


def head(prefix: str, now: float | None) -> list[str]:
    """ARGV[1..2] of every script: the key prefix, the time (None: Redis's ``TIME``)."""
    return [prefix, "" if now is None else ms(now)]


# ---- add.lua -------------------------------------------------------------------------------


def add(
    job_id: str,
    definition: str,
    lane: str,
    kind: str,
    num: int | str,
    anchor: int | str,
    grace: int,
    wire: tuple[str, str, str],
    max_stalls: int,
    window: int | str,
) -> list[Any]:
    """One job's 12 arguments: id, definition (codec.encode), lane, schedule kind
    (after/at/every/cron), its number and anchor, misfire grace (ms; -1: none given),
    ``wire``: misfire, overlap, delivery; max stalls, catch-up window (ms, "": none)."""
    return [job_id, definition, lane, kind, num, anchor, grace, *wire, max_stalls, window]


def add_calls(jobs: Sequence[Sequence[Any]], stamp: str | None = None) -> list[list[Any]]:
    """add.lua's ARGV[3..] of each call for many jobs' ``add`` arguments, in order,
    ``ADD_BATCH`` jobs a call, their arguments in a row (adds.py reads the replies), then
    ``stamp``, the stamp of the key rules applied to them (None: none sent, unchecked)."""
    tail = [] if stamp is None else [stamp]
    return [
        [x for job in jobs[i : i + ADD_BATCH] for x in job] + tail
        for i in range(0, len(jobs), ADD_BATCH)
    ]


# ---- the dispatcher's and the workers' scripts -----------------------------------------


def claim(
    owner: str,
    request_id: str,
    lease: float | None,
    served: str,
    prior: Iterable[int],
    capacity: Mapping[str, int],
    max_batch: int,
) -> list[Any]:
    """claim.lua: owner, request id, lease (ms; "": each job's own), the served tasks'
    text ("*": all), the fences the claim's earlier calls were handed (space-separated),
    then (lane, count) pairs from ARGV[8]: every lane with room, at most ``max_batch``."""
    pairs = [str(x) for lane, n in capacity.items() if n > 0 for x in (lane, min(n, max_batch))]
    lease_ms = "" if lease is None else ms(lease)
    return [owner, request_id, lease_ms, served, " ".join(map(str, prior)), *pairs]


def renew(lease: float, tokens: Iterable[str]) -> list[str]:
    """renew.lua: the lease (ms), then the claims' tokens."""
    return [ms(lease), *tokens]


def complete(job_id: str, token: str, result_json: str) -> list[str]:
    """complete.lua: the job, the claim's token, the result as JSON."""
    return [job_id, token, result_json]


def complete_many(done: Iterable[tuple[str, str, str]]) -> list[str]:
    """complete_many.lua: (job, token, result JSON) triples, in a row."""
    return [x for triple in done for x in triple]


def fail(
    job_id: str,
    token: str,
    error: str,
    retry_in: float | None,
    traceback: str = "",
    interrupted: bool = False,
) -> list[str]:
    """fail.lua: the job, the token, the error (its first ``ERROR_MAX`` characters), the
    retry delay (ms; "": the job's policy decides), the traceback's last
    ``TRACEBACK_MAX`` bytes; ARGV[8] "1" when the run was interrupted (ended, no retry)."""
    tb = traceback.encode()[-TRACEBACK_MAX:].decode(errors="ignore")
    retry = "" if retry_in is None else ms(retry_in)
    out = [job_id, token, error[:ERROR_MAX], retry, tb]
    return [*out, "1"] if interrupted else out


def release(job_id: str, token: str) -> list[str]:
    """release.lua: the job, the claim's token."""
    return [job_id, token]


def quarantine(job_id: str, token: str, reason: str) -> list[str]:
    """quarantine.lua: the job, the claim's token, why (its first ``REASON_MAX``
    characters)."""
    return [job_id, token, reason[:REASON_MAX]]


# ---- calendar series (plan.lua; claiming/calendar_plans.py computes the plan) --------


def plan_after(job_id: str, gen: str, e: str, next_ms: str, after_ms: int) -> list[str]:
    """plan.lua, a plain plan: the job, its generation, its ``e`` and ``next`` fields as
    read, "after", the occurrence after ``next`` (ms)."""
    return [job_id, gen, e, next_ms, "after", str(after_ms)]


def plan_replan(
    job_id: str,
    gen: str,
    e: str,
    next_ms: str,
    keep_ms: int,
    run: bool,
    after_ms: int,
    skipped: tuple[int, int, int, str] | None,
) -> list[str]:
    """plan.lua, a replan: as ``plan_after`` to ARGV[6], then "replan" (ARGV[7]), the
    occurrence kept (ms), "1" if it runs now, the one after it (ms), and the skipped
    occurrences (first ms, last ms, count, reason; four "" if none)."""
    skip = ["", "", "", ""] if skipped is None else [str(x) for x in skipped]
    out = [job_id, gen, e, next_ms, "replan", str(keep_ms), "1" if run else "0"]
    return [*out, str(after_ms), *skip]


def backfill(job_id: str, gen: str, times_ms: Iterable[int | str]) -> list[Any]:
    """backfill.lua: the job, its generation as read, the occurrences to queue (ms)."""
    return [job_id, gen, *times_ms]


# ---- an operator's scripts -------------------------------------------------------------


def job(job_id: str) -> tuple[str]:
    """cancel.lua, pause.lua, resume.lua, trigger.lua, retry.lua, delete.lua: the job."""
    return (job_id,)


def limit(scope: str, text: str) -> tuple[str, str]:
    """limit.lua: the scope, and its limit as stored (``Limit.encode``; "": removed)."""
    return (scope, text)


def rule(name: str, template: str | None) -> tuple[str, str]:
    """rule.lua: the rule's name (``task:<name>``, ``lane:<name>``), its template ("":
    removed)."""
    return (name, template or "")


def entry(entry_id: str) -> tuple[str]:
    """restore.lua, purge.lua: the quarantine entry."""
    return (entry_id,)


def reconcile(count: int, dry_run: bool, cursor: str) -> tuple[int, str, str]:
    """reconcile.lua: job keys to scan (a SCAN count hint), "1" for a dry run, the cursor
    ("": the namespace's shared one, a background pass; "0": a full scan's start)."""
    return (count, "1" if dry_run else "0", cursor)


# ---- the caller's own keys (scripts.CALLER_KEYS: the whole ARGV, no head) ----------------


def fenced(
    invocation_id: str, fence: int, op: str, keep_ms: int | None, args: Sequence[Any]
) -> list[Any]:
    """fenced.lua's ARGV[1..]: the invocation id, its fence, the write (set, hset, xadd),
    how long to keep the ledger (ms; "": no expiry), then the write's own arguments (set:
    the value and a PX ms or ""; hset, xadd: field, value, ...). No prefix, no time: its
    keys are the caller's, passed as KEYS (protocol/fenced.py)."""
    return [invocation_id, fence, op, "" if keep_ms is None else keep_ms, *args]
