#!/usr/bin/env python3
"""Where a burst's per-job Lua goes in claim.lua and complete_many.lua (not a test; by hand).

Each variant is a copy of the assembled script with one line replaced (a text substitution
that must apply), called as a replica calls it on batches of ``--batch`` one-off jobs, so
the difference between two rows is what the piece between them costs per job. EVALSHA µs
per call (``INFO commandstats``) / batch, medians of ``--runs``, against a private
redis-server; the variants run alternately, run by run. A variant is not a correct
script: these copies only say what a piece costs, they are never shipped (the method of
bench_add_ablate.py, for the two scripts of the burst).

* ``claim``: ``--calls`` calls, each claiming ``--batch`` due jobs of a fresh namespace
  (the variants that stop before any write see the same jobs each call);
* ``complete_many``: the same ``--batch`` claimed invocations acknowledged ``--calls``
  times by variants that stop before the first write (the decide phase, read only), and
  once per call on fresh claims by the whole script.

    PYTHONPATH=. python tests/bench/probe_lua_parts.py [--batch 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.claiming import acked_claims  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402

Edit = tuple[str, str, str]  # (file under lua/, line as it is, what replaces it)

INSPECT = "      local x = inspect(due[i], tonumber(due[i + 1]))"
ZREM = "    redis.call('ZREM', key, unpack(members))"
CLAIM: dict[str, list[Edit]] = {
    "checks, reaper (stop before the lanes)": [
        ("claim.lua", "\n-- 2. claim", "\ndo return 'stop' end\n-- 2. claim")
    ],
    "+ fetch the due members, parse them": [
        ("include/inspect.lua", INSPECT, "      local x = {m = parse_member(due[i])}"),
        ("include/inspect.lua", ZREM, "    do return 0 end"),
    ],
    "+ inspect each job (read only)": [("include/inspect.lua", ZREM, "    do return 0 end")],
    "+ admit and issue each claim": [
        (
            "claim.lua",
            "\n-- 3. when to ask again",
            "\ndo return 'stop' end\n-- 3. when to ask again",
        )
    ],
    "+ reply and resend record (the whole script)": [],
}

DECIDE = (
    "    local plan, bad = commit_plan(jobs[i], tokens[i], 'succeeded', "
    "check(jobs[i], tokens[i], datas[i]))"
)
WRITE = "-- 2. write"
STOP = ("complete_many.lua", WRITE, "do return 'stop' end\n" + WRITE)
ACK: dict[str, list[Edit]] = {
    "input, namespace checks, RUNNING entries": [
        ("complete_many.lua", DECIDE, "    local plan = {}"),
        STOP,
    ],
    "+ each token checked (parse_running, not_owned)": [
        (
            "complete_many.lua",
            DECIDE,
            "    local r, c, d = check(jobs[i], tokens[i], datas[i]); local plan = {}",
        ),
        STOP,
    ],
    "instead: only the HMGET of the job's 13 fields": [
        (
            "complete_many.lua",
            DECIDE,
            "    local g = redis.call('HMGET', jkey(jobs[i]), unpack(COMMIT_FIELDS)); "
            "local plan = {}",
        ),
        STOP,
    ],
    "instead: only read_job (HMGET + checks)": [
        (
            "complete_many.lua",
            DECIDE,
            "    local f = read_job(jobs[i], COMMIT_FIELDS); local plan = {}",
        ),
        STOP,
    ],
    "the decide phase as it is (token + read_job)": [STOP],
    "+ the writes (the whole script)": [],
}


def variant(edits: Sequence[Edit], name: str) -> str:
    """The assembled text of lua/``name``.lua with ``edits`` applied."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="lua-parts-")) / "lua"
    shutil.copytree(lua.lua_dir(), d)
    for rel, old, new in edits:
        p = d / rel
        text = p.read_text()
        if old not in text:
            raise SystemExit(f"{rel}: the line to replace is gone (update this probe): {old!r}")
        p.write_text(text.replace(old, new, 1))
    try:
        return lua.assemble((d / f"{name}.lua").read_text(), f"{name}.lua", d)
    finally:
        shutil.rmtree(d.parent)


def fresh(url: str, ns: str, n: int) -> RedisStore:
    store = RedisStore(url, ns)
    for i in range(0, n, 500):
        store.add_many(
            [
                JobSpec(f"j{k}", TaskRef("t.x", '{"i": 1}'), After(0))
                for k in range(i, min(n, i + 500))
            ]
        )
    return store


def claimed(store: RedisStore, n: int) -> list[Any]:
    out: list[Any] = []
    while len(out) < n:
        out += store.claim_due({"default": n - len(out)}, 30.0, "o1").claims
    return out


def per_job(r: redis.Redis, calls: Callable[[], int]) -> float:
    """EVALSHA µs per job of what ``calls()`` sends (it returns the jobs it covered)."""
    r.config_resetstat()
    jobs = calls()
    stat = r.info("commandstats")["cmdstat_evalsha"]
    return stat["usec"] / jobs


def probe_claim(r: redis.Redis, url: str, batch: int, calls: int, runs: int) -> dict[str, float]:
    shas = {k: r.script_load(variant(e, "claim")) for k, e in CLAIM.items()}
    got: dict[str, list[float]] = {k: [] for k in shas}
    for run in range(runs):
        for n, (label, sha) in enumerate(shas.items()):
            store = fresh(url, f"c{run}x{n}", batch * calls)
            key, prefix = store.keys.prefix + "x", store.keys.prefix

            def send(store: RedisStore = store, sha: str = sha, key: str = key,
                     prefix: str = prefix) -> int:  # fmt: skip
                for c in range(calls):
                    argv = list(store.claim_request({"default": batch}, 30.0, "o1").argv)
                    argv[1] = f"rq{c}"  # a fresh request id: never a resend
                    r.evalsha(sha, 1, key, prefix, "", *argv)
                return batch * calls

            got[label].append(per_job(r, send))
            store.close()
    return {k: statistics.median(v) for k, v in got.items()}


def probe_ack(r: redis.Redis, url: str, batch: int, calls: int, runs: int) -> dict[str, float]:
    shas = {k: r.script_load(variant(e, "complete_many")) for k, e in ACK.items()}
    got: dict[str, list[float]] = {k: [] for k in shas}
    for run in range(runs):
        for n, (label, sha) in enumerate(shas.items()):
            whole = not ACK[label]  # writes: fresh claims per call
            store = fresh(url, f"a{run}x{n}", batch * (calls if whole else 1))
            key, prefix = store.keys.prefix + "x", store.keys.prefix
            argsets = [
                acked_claims.ack_args([(c, None) for c in claimed(store, batch)])
                for _ in range(calls if whole else 1)
            ]

            def send(sha: str = sha, key: str = key, prefix: str = prefix,
                     argsets: list[list[Any]] = argsets) -> int:  # fmt: skip
                for c in range(calls):
                    r.evalsha(sha, 1, key, prefix, "", *argsets[c % len(argsets)])
                return batch * calls

            got[label].append(per_job(r, send))
            store.close()
    return {k: statistics.median(v) for k, v in got.items()}


def table(title: str, got: dict[str, float]) -> str:
    """Each row with its difference from the row above ("instead" rows replace the
    per-item work of the row above them: compare them with the first row)."""
    lines, last = [title], None
    for label, us in got.items():
        step = "" if last is None else f"  ({us - last:+.1f})"
        lines.append(f"  {label:48s} {us:6.2f}{step}")
        last = us
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=100, help="jobs per script call")
    ap.add_argument("--calls", type=int, default=10, help="script calls per variant and run")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    with EmbeddedRedis(appendonly=False) as server:
        r = redis.Redis.from_url(server.url)
        head = f"(EVALSHA µs per job, batches of {a.batch}, medians of {a.runs})"
        print(table(f"claim.lua {head}", probe_claim(r, server.url, a.batch, a.calls, a.runs)))
        print(
            table(f"complete_many.lua {head}", probe_ack(r, server.url, a.batch, a.calls, a.runs))
        )


if __name__ == "__main__":
    main()
