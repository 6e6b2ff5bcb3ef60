#!/usr/bin/env python3
"""Redis CPU per job of a claim and an ack: duetime's scripts beside the floor (not a test;
by hand; docs/performance.md#the-floor-what-a-claim-and-an-ack-cost-natively).

Five ways to claim and acknowledge the same one-off jobs, each on a fresh namespace of
``--jobs`` jobs due now (added by duetime; for ``native``, ``kept`` and ``lua`` each job's
hash rewritten as layout 3 kept it, its small fields as fields of their own: the floor as
issue 36 defined it):

* ``native``: the essential commands sent natively and pipelined, no Lua. Per batch of
  ``--batch``: ZRANGEBYSCORE of the due set, then one pipeline of ZREM, one XADD
  ("claimed"), and per job HMGET of the fields a claim reads, HSET of its RUNNING entry,
  ZADD of its lease; the ack, one pipeline: per job HSET of the outcome, ZREM of the
  lease, HDEL of the entry, and one XADD ("succeeded");
* ``packed``: ``kept`` as duetime keeps a job since layout 4, its 16 small fields (gen,
  kind, e, next, ready, running, attempts, cancelled, paused, queued, retries, runs,
  failures, lists, started, keep) in one field ``st`` (lua/include/st.lua): a claim reads
  ``def`` and ``st`` and writes ``st``; an ack reads ``lane`` and ``st`` and writes ``st``
  with ``last_result``, ``last_error``, ``last_token``, ``last_run``, ``state``. Between
  it and ``kept`` is what packing saves natively;
* ``lua``: the same commands in two minimal scripts (a claim and an ack, no checks);
* ``kept``: ``native`` plus what duetime's scripts keep for a job, sent natively and
  pipelined, no check: the commands duetime's claim and ack send for a plain one-off,
  without the reads that only guard a call (key types, resends, the epoch). Per batch:
  ZRANGEBYSCORE WITHSCORES, ZREM, SET of the fence, one HSET of the RUNNING entries and
  one ZADD of the leases, one XADD of the claimed events' lines, HINCRBY, SET of the
  replica's presence and of the reply kept for a resend; per job HMGET of the fields a
  claim reads and HSET of its running count, attempt, pending occurrence. The ack: HMGET of
  the batch's RUNNING entries, ZCOUNT of expired leases; per job HMGET of the fields an ack
  reads, HSET of the outcome (the seven fields a success writes), PEXPIRE; per batch HDEL,
  ZREM, ZADD and trim of ``done:succeeded``, one XADD of the lines, HINCRBY. Between it
  and ``duetime`` is what Lua and the checks cost; between ``native`` and it, what the
  kept data costs;
* ``duetime``: ``claim.lua`` and ``complete_many.lua`` as a replica calls them
  (``RedisStore.claim_due``, then the batched ack's arguments).

Redis CPU (its main thread: ``INFO cpu``) and its commands (``INFO commandstats``) per
job, medians of ``--runs`` runs, the variants alternating run by run on one server; the
ratios are against ``native``. ``--instructions``: the server under callgrind instead,
instructions per job (deterministic: a busy box does not move them; one run each).
``--hashtables``: the RUNNING hash and the lease zset of every variant made a hashtable and
a skiplist before the run (one field and one member over the listpack limits, never
claimed: the lease's at +inf), instead of the listpacks Redis keeps them in below 512
entries and 128 members (``hash-max-listpack-entries``, ``zset-max-listpack-entries``),
where every entry written, read or removed is found by a scan of the whole key.

    PYTHONPATH=. python tests/bench/bench_floor.py [--jobs 20000] [--batch 100] [--runs 5]
        [--instructions] [--hashtables]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

import redis  # noqa: E402
from bench_add_ablate import callgrind_redis  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.claiming import acked_claims  # noqa: E402
from scheduler.stores.redis.protocol import records  # noqa: E402

VARIANTS = ("native", "kept", "packed", "lua", "duetime")
READ = ("gen", "cancelled", "e", "paused", "kind", "def", "running", "next", "retries", "ready")
# an ack's (lua/include/commit.lua), and the fields a success writes (lua/include/retire.lua)
ACK_READ = ("gen", "cancelled", "lane", "queued", "paused", "kind", "e", "retries", "running")
ACK_READ += ("runs", "failures", "lists", "started", "keep")
SUCCESS = {
    "runs": "1",
    "running": "0",
    "last_result": "null",
    "last_error": "",
    "state": "succeeded",
}

CLAIM_LUA = """
local due, jobp, running, lease, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now, n, owner, until_ = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local fence = tonumber(ARGV[5])
local members = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, n)
if #members == 0 then return {} end
redis.call('ZREM', due, unpack(members))
local out = {}
for i, m in ipairs(members) do
  local job = string.match(m, '|s|(.*)$')
  local f = redis.call('HMGET', jobp .. job, 'gen', 'cancelled', 'e', 'paused', 'kind', 'def',
    'running', 'next', 'retries', 'ready')
  local token = owner .. ':' .. (fence + i)
  redis.call('HSET', running, token, job .. '|' .. now .. '|1')
  redis.call('ZADD', lease, until_, token)
  out[#out + 1] = job
  out[#out + 1] = f[6]
end
redis.call('XADD', events, '*', 'kind', 'claimed', 'n', #members)
return out
"""

ACK_LUA = """
local jobp, running, lease, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = ARGV[1]
for i = 2, #ARGV, 3 do
  local job, token, result = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('HSET', jobp .. job, 'last_result', result, 'last_run', now)
  redis.call('ZREM', lease, token)
  redis.call('HDEL', running, token)
end
redis.call('XADD', events, '*', 'kind', 'succeeded', 'n', (#ARGV - 1) / 3)
return 'ok'
"""


def add_jobs(store: RedisStore, n: int, tag: str) -> None:
    for i in range(0, n, 500):
        store.add_many(
            [
                JobSpec(f"{tag}{k:08d}", TaskRef("t.x", '{"i":1}'), After(0))
                for k in range(i, min(n, i + 500))
            ]
        )


def due_batches(r: Any, due: str, jobs: int, batch: int, scores: bool) -> Iterator[tuple[int, Any]]:
    """(now ms, the due members fetched then) until ``jobs`` have been fetched, ``batch`` at
    a time; ``scores``: (member, score) pairs."""
    done = 0
    while done < jobs:
        now = int(time.time() * 1000)
        got = r.zrangebyscore(due, "-inf", now, start=0, num=batch, withscores=scores)
        if got:
            yield now, got
            done += len(got)


def run_native(r: Any, store: RedisStore, jobs: int, batch: int) -> None:
    k = store.keys
    due, running, lease, events = k.due("default"), k.running, k.lease, k.events
    fence = 0
    for now, members in due_batches(r, due, jobs, batch, False):
        p = r.pipeline(transaction=False)
        p.zrem(due, *members)
        claimed = []
        for m in members:
            job = m.split("|s|", 1)[1]
            fence += 1
            token = f"o:{fence}"
            p.hmget(k.job(job), READ)
            p.hset(running, token, f"{job}|{now}|1")
            p.zadd(lease, {token: now + 30_000})
            claimed.append((job, token))
        p.xadd(events, {"kind": "claimed", "n": len(members)})
        p.execute()
        p = r.pipeline(transaction=False)
        for job, token in claimed:
            p.hset(k.job(job), mapping={"last_result": "null", "last_run": now})
            p.zrem(lease, token)
            p.hdel(running, token)
        p.xadd(events, {"kind": "succeeded", "n": len(claimed)})
        p.execute()


def run_kept(r: Any, store: RedisStore, jobs: int, batch: int) -> None:
    kept(r, store, jobs, batch, packed=False)


def run_packed(r: Any, store: RedisStore, jobs: int, batch: int) -> None:
    kept(r, store, jobs, batch, packed=True)


def kept(r: Any, store: RedisStore, jobs: int, batch: int, packed: bool) -> None:
    """``kept``: each job's fields as layout 3 kept them; ``packed``: its small fields in
    ``st`` as include/plain.lua reads and writes a plain one-off's (gen, kind, e, next,
    ready; running, attempts, ... keep)."""
    k = store.keys
    due, running, lease, events = k.due("default"), k.running, k.lease, k.events
    fence = 0
    for now, got in due_batches(r, due, jobs, batch, True):
        members = [m for m, _ in got]
        p = r.pipeline(transaction=False)
        p.zrem(due, *members)
        claimed, entries, leases, lines = [], {}, {}, []
        for m, score in got:
            job = m.split("|s|", 1)[1]
            fence += 1
            token = f"o:{fence}"
            head = f"1,after,,{int(score)},,"
            if packed:
                p.hmget(k.job(job), ("def", "st"))
                p.hset(k.job(job), "st", head + "1,1,,,,,,,,,")
            else:
                p.hmget(k.job(job), READ)
                p.hset(k.job(job), mapping={"running": "1", "attempts": "1", "e": ""})
            entries[token] = f"1|{int(score)}|1|0|{fence}|{job}"
            leases[token] = now + 30_000
            lines.append(f"{int(score)}|1||{job}")
            claimed.append((job, token, head))
        p.set(k.prefix + "fence", fence)
        p.hset(running, mapping=entries)
        p.zadd(lease, leases)
        p.xadd(events, {"kind": "claimed", "n": len(lines), "batch": "\n".join(lines)})
        p.hincrby(k.prefix + "stats", "claimed", len(lines))
        p.set(k.prefix + "replica:o", now, px=90_000)
        p.set(k.prefix + "claimed:o", "x" * (60 * len(lines)), px=60_000)  # the reply kept
        p.execute()
        tokens = [t for _, t, _ in claimed]
        p = r.pipeline(transaction=False)
        p.hmget(running, tokens)
        p.zcount(lease, "-inf", now)
        for job, token, head in claimed:
            outcome = {**SUCCESS, "last_token": token, "last_run": now}
            if packed:
                p.hmget(k.job(job), ("lane", "st"))
                del outcome["runs"], outcome["running"]
                p.hset(k.job(job), mapping={"st": head + "0,1,,,,,1,,,,", **outcome})
            else:
                p.hmget(k.job(job), ACK_READ)
                p.hset(k.job(job), mapping=outcome)
            p.pexpire(k.job(job), 86_400_000)
        p.hdel(running, *tokens)
        p.zrem(lease, *tokens)
        p.zadd(k.prefix + "done:succeeded", {job: now for job, _, _ in claimed})
        p.zremrangebyscore(k.prefix + "done:succeeded", "-inf", now - 86_400_000)
        p.xadd(events, {"kind": "succeeded", "n": len(lines), "batch": "\n".join(lines)})
        p.hincrby(k.prefix + "stats", "succeeded", len(lines))
        p.execute()


def unpack_jobs(r: Any, store: RedisStore) -> None:
    """Rewrite every job's hash as layout 3 held it (``native``, ``kept``, ``lua``: the floor
    as issue 36 defined it): its small fields as fields of their own, not packed in ``st``."""
    jobs = [m.split("|s|", 1)[1] for m in r.zrange(store.keys.due("default"), 0, -1)]
    with r.pipeline(transaction=False) as p:
        for job in jobs:
            p.hgetall(store.keys.job(job))
        hashes = p.execute()
    with r.pipeline(transaction=False) as p:
        for job, h in zip(jobs, hashes, strict=True):
            p.delete(store.keys.job(job))
            p.hset(store.keys.job(job), mapping=records.job_hash(h))
        p.execute()


def run_lua(r: Any, store: RedisStore, jobs: int, batch: int) -> None:
    k = store.keys
    claim, ack = r.register_script(CLAIM_LUA), r.register_script(ACK_LUA)
    done, fence = 0, 0
    while done < jobs:
        now = int(time.time() * 1000)
        got = claim(
            keys=[k.due("default"), k.prefix + "job:", k.running, k.lease, k.events],
            args=[now, batch, "o", now + 30_000, fence],
        )
        if not got:
            continue
        argv: list[Any] = [now]
        for i in range(0, len(got), 2):
            fence += 1
            argv += [got[i], f"o:{fence}", "null"]
        ack(keys=[k.prefix + "job:", k.running, k.lease, k.events], args=argv)
        done += len(got) // 2


def run_duetime(r: Any, store: RedisStore, jobs: int, batch: int) -> None:
    done = 0
    while done < jobs:
        claims = store.claim_due({"default": batch}, 30.0, "o").claims
        if not claims:
            continue
        codes = store.call_script(
            "complete_many", *acked_claims.ack_args([(c, None) for c in claims])
        )
        assert all(c == "ok" for c in codes), codes
        done += len(claims)


RUN: dict[str, Callable[[Any, RedisStore, int, int], None]] = {
    "native": run_native,
    "kept": run_kept,
    "packed": run_packed,
    "lua": run_lua,
    "duetime": run_duetime,
}


def cpu(r: Any) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def commands(r: Any) -> int:
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


def one(
    r: Any, variant: str, jobs: int, batch: int, run: int, tables: bool = False
) -> dict[str, float]:
    store = RedisStore(r, f"floor{run}{variant}")
    store._upkeep_at = float("inf")  # no reconciler pass inside the measured calls
    add_jobs(store, jobs, variant[0])
    if variant in ("native", "kept", "lua"):
        unpack_jobs(r, store)
    if tables:
        encode_as_tables(r, store)
    time.sleep(0.01)  # due now: every job is due at the first call
    c0, n0 = cpu(r), commands(r)
    RUN[variant](r, store, jobs, batch)
    c1, n1 = cpu(r), commands(r)
    r.flushall()  # this private server's: the next run starts empty
    return {"cpu_us": (c1 - c0) * 1e6 / jobs, "commands": (n1 - n0) / jobs}


@contextlib.contextmanager
def server() -> Iterator[Any]:
    with EmbeddedRedis(appendonly=False) as srv:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        try:
            yield r
        finally:
            r.close()


def encode_as_tables(r: Any, store: RedisStore) -> None:
    """RUNNING a hashtable, the lease zset a skiplist (``--hashtables``): a field and a
    member longer than any listpack limit (a hash or zset never converts back)."""
    r.hset(store.keys.running, "~" * 1024, "~")
    r.zadd(store.keys.lease, {"~" * 1024: float("inf")})


def instructions(variant: str, jobs: int, batch: int, tables: bool = False) -> float:
    out = os.path.join(tempfile.mkdtemp(prefix="cg-floor-"), "cg")
    with callgrind_redis(out) as (client, control):
        store = RedisStore(client, f"floor{variant}")
        store._upkeep_at = float("inf")
        add_jobs(store, jobs, variant[0])
        if variant in ("native", "kept", "lua"):
            unpack_jobs(client, store)
        if tables:
            encode_as_tables(client, store)
        time.sleep(0.01)
        control("-z")
        RUN[variant](client, store, jobs, batch)
        control("-d")
    dumps = sorted(f for f in glob.glob(out + ".*") if re.search(r"\.\d+$", f))
    dumps.sort(key=lambda f: int(f.rsplit(".", 1)[1]))
    m = re.search(r"^summary: (\d+)", pathlib.Path(dumps[-1]).read_text(), re.M)
    assert m, "no callgrind summary"
    return int(m.group(1)) / jobs


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--hashtables", action="store_true", help="RUNNING and lease as tables")
    a = ap.parse_args()
    enc = ", RUNNING and lease as tables" if a.hashtables else ""
    if a.instructions:
        got = {v: instructions(v, a.jobs, a.batch, a.hashtables) for v in VARIANTS}
        print(f"Redis instructions per job ({a.jobs} one-off jobs, {a.batch} per call{enc})")
        for v in VARIANTS:
            print(f"  {v:8s} {got[v]:10,.0f}  x{got[v] / got['native']:.2f}")
        return
    rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with server() as r:
        for run in range(a.runs):
            for v in VARIANTS:
                rows[v].append(one(r, v, a.jobs, a.batch, run, a.hashtables))
                print(f"  run {run + 1} {v}: {rows[v][-1]}", flush=True)
    med = {v: {k: statistics.median(x[k] for x in rows[v]) for k in rows[v][0]} for v in VARIANTS}
    print(
        f"Redis main-thread CPU per job ({a.jobs} one-off jobs due at once, {a.batch} per "
        f"call{enc}, medians of {a.runs}; load {os.getloadavg()[0]:.2f})"
    )
    print("| | µs per job | vs native | commands per job |")
    print("|---|---:|---:|---:|")
    for v in VARIANTS:
        m = med[v]
        ratio = m["cpu_us"] / med["native"]["cpu_us"]
        print(f"| {v} | {m['cpu_us']:.1f} | {ratio:.2f} | {m['commands']:.2f} |")


if __name__ == "__main__":
    main()
