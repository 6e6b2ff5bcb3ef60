"""The upkeep of a shared namespace: the reconciler and the quarantine.

The reconciler (reconcile.lua, lua/include/repair.lua) repairs what a crash or a past bug
may have left behind: a live job with no due entry and nothing running is queued again (a
one-off at-most-once job whose invocation was issued is recorded as abandoned instead), a
`running` count that no RUNNING entry backs is set right, a lease entry that no RUNNING
entry backs is dropped. Each pass is one script call over at most ``count`` job keys (a
SCAN from a cursor kept in Redis, shared by replicas, never ``KEYS``); replicas run a
pass when they start and then once per resync period, and ``duetime doctor`` runs a full
scan on demand.

The live-job count: the scripts keep, in the ``stats`` hash, ``live``: +1 when add.lua
creates a job (or replaces a retired one), retry.lua makes a retired job live again or
restore.lua puts one back; -1 when a job retires (a one-off's last run ended, dead letter,
cancel, abandoned), is deleted or is moved aside. ``live_since`` says when the count began:
add.lua sets it on a new namespace's first job; a namespace older than the count, or one
whose ``stats`` hash was lost (evicted, deleted by hand), has none, and its count is
unknown: ``duetime doctor`` says so, and starts it (``START_COUNT``) at the live jobs it
found when the namespace is healthy, quiet during its scan, and the server has not evicted
a key since it started.
``duetime doctor`` compares the count with the live jobs (keys not retired) its full scan
finds: the difference is jobs lost by Redis (eviction, a key deleted by hand). Exact on
a quiet namespace; when jobs change during the scan, a lower bound (the count minus what
was found minus the state changes recorded meanwhile).

The quarantine is the one place where data that does not parse ends (the scripts move it
there: see lua/README.md): the ``quarantined`` hash holds a JSON record per entry, and
``quarantined:<id>`` the raw data, until an operator restores (restore.lua) or purges
(purge.lua) it. Namespaces written before 0.2 may also hold a legacy ``quarantine`` list
of bare due members: it is listed, and purged by ``purge(ALL)``.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

from scheduler.model import Finding, Quarantined, Reconciled
from scheduler.stores.redis.protocol import gateway, script_args
from scheduler.stores.redis.protocol.keys import LIVE_FIELDS, Keys
from scheduler.stores.redis.protocol.requests import Calls, Eval, Op, Scan, Script, one, run_on

PASS_KEYS = 100  # job keys per background pass (a SCAN count hint): ~2 ms of Redis at 10^5 jobs
DOCTOR_KEYS = 1000  # per call of a full scan
LEGACY = "legacy:"  # entry ids of the legacy list: legacy:<index>
ALL = "*"

log = logging.getLogger("duetime.redis")


class UpkeepStore(Protocol):
    """What upkeep needs of a ``RedisStore`` (its public surface)."""

    keys: Keys

    @property
    def redis(self) -> Any: ...

    def call_script(self, name: str, *args: Any) -> Any: ...

    def reachable(self) -> AbstractContextManager[None]: ...

    def redis_now_ms(self) -> int: ...


class Periodic(UpkeepStore, Protocol):
    """A store that runs background passes (``RedisStore``)."""

    resync: float
    _upkeep_at: float


class UpkeepMethods:
    """``RedisStore``'s upkeep methods (mixed in; each is a function of this module)."""

    def _upkeep(self: Periodic) -> None:
        """A reconciler pass, at most once per resync period (never raises)."""
        self._upkeep_at = time.monotonic() + self.resync
        background_pass(self)

    def reconcile(
        self: UpkeepStore, *, dry_run: bool = False, start_count: bool = False
    ) -> Reconciled:
        """Check every job once (``duetime doctor``); repair unless ``dry_run``; compare
        the live jobs found with the scripts' count (``start_count``: start a missing count
        when the namespace is healthy and quiet: see the module docstring)."""
        with self.reachable():
            return reconcile_all(self, dry_run, start_count)

    def quarantined(self: UpkeepStore) -> list[Quarantined]:
        """What was moved aside because it did not parse, oldest first."""
        with self.reachable():
            return quarantined(self)

    def restore(self: UpkeepStore, entry_id: str) -> str:
        """Put a quarantined job back (``restored``, ``missing``, ``exists``, ``no-job``)."""
        return restore(self, entry_id)

    def purge_quarantined(self: UpkeepStore, entry_id: str) -> int:
        """Drop a quarantine entry and its raw data (``"*"``: all); how many were dropped."""
        with self.reachable():
            return purge(self, entry_id)


def background_pass(store: UpkeepStore) -> None:
    """A replica's pass: repairs are logged (a warning each); never raises, so a claim
    that carries it never fails for it (the next period tries again)."""
    try:
        done = reconcile_pass(store)
    except Exception as exc:  # noqa: BLE001 - logged; the next period tries again
        log.warning("reconciler pass failed (%s); it runs again next resync period", exc)
        return
    for f in done.findings:
        log.warning("reconciler: job %s: %s; %s", f.job_id, f.problem, f.action)


def reconcile_pass(store: UpkeepStore, count: int = PASS_KEYS) -> Reconciled:
    """One background pass from the namespace's shared cursor (repairs)."""
    reply = json.loads(store.call_script("reconcile", *script_args.reconcile(count, False, "")))
    return _reconciled(reply, reply["cursor"] == "0")


def reconcile_all(
    store: UpkeepStore, dry_run: bool = False, start_count: bool = False
) -> Reconciled:
    """A full scan of the namespace from a cursor of its own (the shared one is left
    alone): every job checked once, repaired unless ``dry_run``, and the live jobs found
    compared with the scripts' count."""
    return run_on(store, reconcile_op(store.keys, dry_run, start_count))


# Start the live count at ARGV[1] jobs (KEYS[1]: stats) if it has none and its event
# counters still add up to ARGV[2] (nothing changed since doctor's scan began); 1 if started.
START_COUNT = """
local got = redis.call('HGETALL', KEYS[1])
local sum = 0
for i = 1, #got, 2 do
  if got[i] == 'live_since' then return 0 end
  if got[i] ~= 'live' then sum = sum + (tonumber(got[i + 1]) or 0) end
end
if sum ~= tonumber(ARGV[2]) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'live', ARGV[1], 'live_since', string.format('%d', now))
return 1
"""
START = gateway.Lua(START_COUNT)


def reconcile_op(keys: Keys, dry_run: bool = False, start_count: bool = False) -> Op[Reconciled]:
    """``reconcile_all`` as an operation (protocol/requests.py)."""
    cursor, scanned, leases, live = "0", 0, 0, 0
    findings: list[Finding] = []
    before = yield from _stats_op(keys)
    while True:
        args = script_args.reconcile(DOCTOR_KEYS, dry_run, cursor)
        reply = json.loads((yield Script(keys.shard, "reconcile", args)))
        scanned += reply["scanned"]
        leases = max(leases, reply["leases"])
        live += int(reply.get("live") or 0)
        findings += _reconciled(reply, False).findings
        cursor = reply["cursor"]
        if cursor == "0":
            break
    findings += yield from undecodable_op(keys, {f.job_id for f in findings})
    after = yield from _stats_op(keys)
    # the state changes others recorded during the scan: this scan's repairs each recorded
    # one event; those that ended a live job (abandoned, moved aside; recounted may retire
    # a cancelled one) were counted before and not found after
    own = [f for f in findings if f.action in OWN_EVENTS]
    churn = max(0, abs(_events_total(after) - _events_total(before)) - len(own))
    ended = sum(1 for f in findings if f.action in OWN_ENDS)
    counted = _live_count(before)
    lost = None if counted is None else max(0, counted - live - ended - churn)
    started = 0
    healthy = not any(f.action in UNREPAIRED for f in findings)
    if counted is None and start_count and not dry_run and churn == 0 and healthy:
        start = (live, _events_total(before))
        started = yield Eval(keys.shard, START, (keys.stats,), start)  # protocol/gateway.py
        if started:
            counted, lost = live, 0
    return Reconciled(
        scanned,
        tuple(findings),
        leases,
        True,
        live_counted=counted,
        live_found=live,
        lost=lost,
        churn=churn,
        uncounted=int(counted is None),
        started=int(started),
    )


UNREPAIRED = ("reported", "none (dry run)")  # a finding's action when nothing was repaired
OWN_EVENTS = ("requeued", "rescored", "abandoned", "moved aside")  # one event each
OWN_ENDS = ("abandoned", "moved aside", "recounted")  # may have ended a live job


def _stats_op(keys: Keys) -> Op[dict[str, str] | None]:
    """The ``stats`` hash (None: not a hash, garbage)."""
    (got,) = yield Calls(keys.shard, (("hgetall", (keys.stats,), {}),), lenient=True)
    return got if isinstance(got, dict) else None


def _events_total(stats: dict[str, str] | None) -> int:
    """The sum of the event counters in ``stats``: it moves with every state change."""
    return sum(int(v) for k, v in (stats or {}).items() if k not in LIVE_FIELDS and _is_int(v))


def _live_count(stats: dict[str, str] | None) -> int | None:
    """The scripts' count of live jobs, or None when there is none (no ``live_since``)."""
    if not stats or "live_since" not in stats:
        return None
    value = stats.get("live", "0")
    return int(value) if _is_int(value) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 19


def undecodable_op(keys: Keys, known: set[str]) -> Op[list[Finding]]:
    """The jobs whose definition Lua accepts (UTF-8 text) but Python cannot read (not JSON,
    not an object, arguments that are not an object): reported, not moved (no script may
    move a job it has not claimed without a token); the claim moves each aside when it
    comes due. ``known``: jobs already found (by reconcile.lua)."""
    from scheduler.stores.redis.protocol import definitions

    found, cursor = [], 0
    while True:
        cursor, names = yield Scan(keys.shard, cursor, keys.job("*"), DOCTOR_KEYS, keys.lanes)
        ids = [n[len(keys.job("")) :] for n in names]
        ids = [i for i in ids if i not in known]
        calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...] = tuple(
            ("hget", (keys.job(i), "def"), {}) for i in ids
        )
        texts = (yield Calls(keys.shard, calls, lenient=True)) if calls else []
        for job_id, text in zip(ids, texts, strict=True):
            if not isinstance(text, str):
                continue  # gone, or not a hash (reconcile.lua's to report)
            try:
                definitions.decode(text, job_id)
            except definitions.UNREADABLE as exc:
                why = f"definition does not parse ({type(exc).__name__}: {str(exc)[:120]})"
                found.append(Finding(job_id, why, "reported: moved aside when it comes due"))
        if int(cursor) == 0:
            return found


def _reconciled(reply: dict[str, Any], complete: bool) -> Reconciled:
    found = reply.get("found") or []  # cjson encodes an empty table as {}
    return Reconciled(
        reply["scanned"],
        tuple(Finding(*row) for row in found),
        reply["leases"],
        complete,
    )


def sum_reconciled(each: list[Reconciled]) -> Reconciled:
    """Several shards' full scans as one (one count per shard, summed: the count is None
    if any shard has none; ``lost`` adds up the shards that have one)."""
    counted = [r.live_counted for r in each]
    lost = [r.lost for r in each if r.lost is not None]
    return Reconciled(
        sum(r.scanned for r in each),
        tuple(f for r in each for f in r.findings),
        sum(r.leases_dropped for r in each),
        all(r.complete for r in each),
        live_counted=None if None in counted else sum(c or 0 for c in counted),
        live_found=sum(r.live_found for r in each),
        lost=sum(lost) if lost else None,
        churn=sum(r.churn for r in each),
        uncounted=sum(r.uncounted for r in each),
        started=sum(r.started for r in each),
    )


def quarantined(store: UpkeepStore) -> list[Quarantined]:
    """Every entry of the quarantine, oldest first (legacy entries last)."""
    return run_on(store, quarantined_op(store.keys))


def quarantined_op(keys: Keys) -> Op[list[Quarantined]]:
    """``quarantined`` as an operation (protocol/requests.py)."""
    found, legacy = yield Calls(
        keys.shard,
        (("hgetall", (keys.quarantined,), {}), ("lrange", (keys.quarantine, 0, -1), {})),
    )
    out = [record(entry, raw) for entry, raw in found.items()]
    out.sort(key=lambda q: (q.at is None, q.at or 0.0, q.entry_id))
    out += [
        Quarantined(f"{LEGACY}{i}", "", "malformed due entry", None, "claim", m, "", None, "", True)
        for i, m in enumerate(legacy)
    ]
    return out


def record(entry: str, raw: str) -> Quarantined:
    """One record of the ``quarantined`` hash (the format lua/README.md gives); a record
    that does not parse itself is shown with the reason it cannot be read."""
    try:
        d = json.loads(raw)
        at, score = d.get("at"), d.get("score")
        return Quarantined(
            entry_id=entry,
            job_id=str(d.get("job") or ""),
            reason=str(d.get("reason") or ""),
            at=None if not isinstance(at, int | float) else at / 1000,
            found_by=str(d.get("by") or ""),
            member=str(d.get("member") or ""),
            lane=str(d.get("lane") or ""),
            due=None if not isinstance(score, int | float) or score < 0 else score / 1000,
            key_type=str(d.get("type") or ""),
        )
    except (ValueError, AttributeError):
        return Quarantined(
            entry, "", f"unreadable record: {raw[:200]!r}", None, "", "", "", None, ""
        )


def raw_data(store: UpkeepStore, entry: str, limit: int = 4096) -> tuple[str, Any]:
    """The raw data kept for ``entry``: its Redis type and value (a hash as a dict, a
    string cut to ``limit`` characters; other types as their type name only)."""
    key = store.keys.quarantined_data(entry)
    kind = str(store.redis.type(key))
    if kind == "hash":
        return kind, {k: v[:limit] for k, v in store.redis.hgetall(key).items()}
    if kind == "string":
        return kind, str(store.redis.getrange(key, 0, limit - 1))
    return kind, None


def restore(store: UpkeepStore, entry: str) -> str:
    """Put an entry back (restore.lua): ``restored``, ``missing``, ``exists`` or
    ``no-job`` (see the script's header)."""
    return run_on(store, restore_op(store.keys, entry))


def restore_op(keys: Keys, entry: str) -> Op[str]:
    """``restore`` as an operation. A definition Python cannot read is found first (no
    script reads JSON): ``still-bad <why>``, and the entry stays."""
    from scheduler.stores.redis.protocol import definitions

    (text,) = yield Calls(keys.shard, (("hget", (keys.quarantined_data(entry), "def"), {}),), True)
    if isinstance(text, str):
        try:
            definitions.decode(text, entry)
        except definitions.UNREADABLE as exc:
            return f"still-bad definition does not parse ({type(exc).__name__}: {exc})"[:300]
    return str((yield Script(keys.shard, "restore", script_args.entry(entry))))


def purge(store: UpkeepStore, entry: str) -> int:
    """Drop one entry (``ALL``: every entry, and the legacy list) and the raw data kept
    with it. Returns how many entries were dropped."""
    return run_on(store, purge_op(store.keys, entry))


def purge_op(keys: Keys, entry: str) -> Op[int]:
    """``purge`` as an operation (protocol/requests.py)."""
    if entry != ALL:
        if entry.startswith(LEGACY):
            raise ValueError("legacy entries are purged together: purge all of them")
        return int((yield Script(keys.shard, "purge", script_args.entry(entry))))
    dropped = 0
    for e in (yield from one(keys.shard, "hkeys", keys.quarantined)):
        dropped += int((yield Script(keys.shard, "purge", script_args.entry(e))))
    legacy, _ = yield Calls(
        keys.shard, (("llen", (keys.quarantine,), {}), ("delete", (keys.quarantine,), {}))
    )
    return dropped + int(legacy)


def delete_namespace(store: UpkeepStore, batch: int = 500) -> int:
    """Delete every key of the store's namespace (this shard's), SCAN by SCAN (never
    ``KEYS``), in batches of UNLINK; returns how many keys went. Keys written meanwhile
    by a live replica may survive: stop replicas first."""
    gone = 0
    keys: list[str] = []
    for key in store.redis.scan_iter(match=store.keys.prefix + "*", count=batch):
        keys.append(key)
        if len(keys) >= batch:
            gone += int(store.redis.unlink(*keys))
            keys = []
    if keys:
        gone += int(store.redis.unlink(*keys))
    return gone
