#!/usr/bin/env python3
"""What one script call and one Lua statement cost Redis, in instructions (not a test; by
hand; docs/performance.md, *What a call and a statement cost*).

``--steps claim`` / ``--steps ack``: a call's fixed part as the gateway sends it (the
script's library function, ``FCALL``), step by step. For each step, a copy of this
checkout whose script returns just before it (``do return end`` inserted at a marker
line) serves ``--calls`` calls on a redis-server under callgrind: claim.lua with nothing
due, complete_many.lua acking one job a call. The rows are cumulative: a row's step is
what the script's part between two markers costs a call.

``--statements``: single statements inside a script: each is run in a loop of
``--calls`` iterations in one ``EVAL`` (a small hash, a 1,000-member sorted set and a
stream planted first), the same loop with an empty body subtracted.

    PYTHONPATH=. python tests/bench/probe_lua_calls.py --steps claim [--calls 200]
    PYTHONPATH=. python tests/bench/probe_lua_calls.py --statements
"""

from __future__ import annotations

import argparse
import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_add_ablate import callgrind_redis  # noqa: E402
from probe_claim_instructions import summary  # noqa: E402

# (label, the line of the script the call returns before; "" = the whole script)
STEPS = {
    "claim": [
        ("FCALL, the per-call set-up, the layout check", "local owner, req, lease, served ="),
        ("input, resend lookup", "-- the namespace keys this call may touch"),
        ("namespace key checks", "local now, now_us = now_ms_us()"),
        ("the reaper", "-- 2. jobs that waited"),
        ("unpark", "-- 3. claim, lane by lane"),
        ("the lanes (nothing due)", "write_claims(b)\n"),
        ("write_claims", "-- 4. when to ask again"),
        ("the next-ask", "if lease then redis.call('SET', P .. 'replica:'"),
        ("the replica's key, the task list", "-- 5. the reply"),
        ("the reply and its resend record (the whole call)", ""),
    ],
    "ack": [
        ("FCALL, the per-call set-up, the layout check", "if #ARGV < 5 or"),
        ("input", "local corrupt = commit_guard('succeeded')"),
        ("namespace key checks", "local now = now_ms()"),
        ("TIME, RUNNING HMGET, lease ZCOUNT", "-- One success, as complete.lua"),
        ("one item decided", "-- 2. write (a job's second"),
        ("one item written", "if #taken > 0 then"),
        ("RUNNING HDEL, lease ZREM", "list_done(now, 'succeeded', retired)"),
        ("done: list, live count", "if lines and #lines > 0 then"),
        ("the events' XADD and counter (the whole call)", ""),
    ],
}
SCRIPT = {"claim": "claim.lua", "ack": "complete_many.lua"}


def dumped(out: str) -> int:
    """Instructions counted by the newest of callgrind's dumps ``out``.N."""
    dumps = [f for f in glob.glob(out + ".*") if re.search(r"\.\d+$", f)]
    return summary(max(dumps, key=lambda f: int(f.rsplit(".", 1)[1])))


CHILD = """
import sys, time
tree, which, calls, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, tree)
import scheduler
assert scheduler.__file__.startswith(tree), scheduler.__file__
sys.path.insert(0, sys.argv[5])
from bench_add_ablate import callgrind_redis
from probe_lua_calls import dumped
from scheduler.model import After, JobSpec, TaskRef
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.claiming import acked_claims


with callgrind_redis(out) as (client, control):
    store = RedisStore(client, "calls")
    store._upkeep_at = float("inf")
    warm = 20
    if which == "claim":
        store.add_many([JobSpec(f"w{k}", TaskRef("t.x", "{}"), After(3600)) for k in range(3)])
        send = [lambda: store.call_script("claim", *store.claim_request({"default": 10}, 30.0,
                "o").argv)] * (calls + warm)
    else:
        jobs = [JobSpec(f"j{k}", TaskRef("t.x", "{}"), After(0)) for k in range(calls + warm)]
        store.add_many(jobs)
        time.sleep(0.01)  # due now
        claims = []
        while len(claims) < calls + warm:
            claims += store.claim_due({"default": 100}, 30.0, "o").claims
        send = [lambda c=c: store.call_script("complete_many", *acked_claims.ack_args([(c, None)]))
                for c in claims]
    for f in send[:warm]:
        f()
    control("-z")
    for f in send[warm:]:
        f()
    control("-d")
    print(dumped(out) / calls)
"""


def step_cost(which: str, marker: str, calls: int) -> float:
    """Instructions per call of a copy of this checkout whose script returns at ``marker``."""
    tree = pathlib.Path(tempfile.mkdtemp(prefix="lua-calls-"))
    try:
        shutil.copytree(ROOT / "scheduler", tree / "scheduler",
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        shutil.copytree(ROOT / "lua", tree / "lua")
        if marker:
            p = tree / "lua" / SCRIPT[which]
            text = p.read_text()
            if text.count(marker) != 1:
                raise SystemExit(
                    f"{SCRIPT[which]}: the marker is gone (update this probe): {marker!r}"
                )
            early = "do return 'x' end\n" if which == "claim" else "do return {'ok'} end\n"
            p.write_text(text.replace(marker, early + marker))
        out = str(tree / "cg")
        run = subprocess.run(
            [sys.executable, "-c", CHILD, str(tree), which, str(calls), out,
             str(ROOT / "tests" / "bench")],
            capture_output=True, text=True, cwd=tempfile.gettempdir(),
            env={**os.environ, "PYTHONPATH": str(tree)},
        )  # fmt: skip
        if run.returncode:
            raise SystemExit(run.stderr[-2000:])
        return float(run.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(tree)


SMALL_HASH = (
    'redis.call(\'HSET\', \'h\', \'def\', \'{"a":"{}","s":["after",0],"t":"t.x"}\', '
    "'kind', 'after', 'gen', '3', 'e', '', 'next', '1796462839390', 'running', '1', "
    "'attempts', '1')"
)
SETUP = (
    f"{SMALL_HASH} for i = 1, 1000 do redis.call('ZADD', 'z', i, 'm' .. i) end "
    "redis.call('XADD', 's', '*', 'a', '1') return 1"
)
STATEMENTS = {
    "redis.call GET (absent key)": "redis.call('GET', 'nokey')",
    "redis.call HLEN": "redis.call('HLEN', 'h')",
    "redis.call ZCARD (1,000 members)": "redis.call('ZCARD', 'z')",
    "redis.call TYPE": "local t = redis.call('TYPE', 'h')['ok']",
    "HMGET of 1 field": "redis.call('HMGET', 'h', 'gen')",
    "HMGET of 7 fields, present": "redis.call('HMGET', 'h', 'def', 'kind', 'gen', 'e', "
    "'next', 'running', 'attempts')",
    "HMGET of 7 fields, absent": "redis.call('HMGET', 'h', 'a1', 'a2', 'a3', 'a4', 'a5', "
    "'a6', 'a7')",
    "HSET of 3 fields": "redis.call('HSET', 'h', 'running', '1', 'attempts', '1', 'e', '')",
    "HSET of 7 fields": "redis.call('HSET', 'h', 'running', '1', 'attempts', '1', 'e', '', "
    "'gen', '3', 'kind', 'after', 'next', '1796462839390', 'x1', '1')",
    "PEXPIRE": "redis.call('PEXPIRE', 'h', '86400000')",
    "a table of 7 fields (constructor)": "local t = {a = 1, b = 2, c = 3, d = 4, e = 5, "
    "f = 6, g = 7}",
    "a table of 7 fields (grown)": "local t = {} t.a = 1 t.b = 2 t.c = 3 t.d = 4 t.e = 5 "
    "t.f = 6 t.g = 7",
    "string.format('%d') of an epoch ms": "local s = string.format('%d', 1796462839390 + i)",
    "tonumber of an epoch ms": "local n = tonumber('1796462839390')",
    "a pattern of 7 captures (a RUNNING entry)": "local a, b, c, d, e, f, g = string.match("
    "'3|1796462839390|1|0|12345|a00000001', "
    "'^(%d+)|(%d+)(@?%d*)|(%d+)|(%d+)|(%d+)|([^\\128-\\255]+)$')",
}


def statements(calls: int) -> dict[str, float]:
    out = os.path.join(tempfile.mkdtemp(prefix="cg-statements-"), "cg")
    rows = {}
    loop = "for i = 1, %d do\n%s\nend\nreturn 1"

    def once(client, control, body: str) -> int:  # type: ignore[no-untyped-def]
        script = loop % (calls, body)
        client.eval(script, 0)  # warm: its setup's allocations, the script cache
        control("-z")
        client.eval(script, 0)
        control("-d")
        return dumped(out)

    with callgrind_redis(out) as (client, control):
        client.eval(SETUP, 0)
        empty = once(client, control, "local x = i")
        for label, body in STATEMENTS.items():
            rows[label] = (once(client, control, body) - empty) / calls
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", choices=sorted(STEPS), help="a call's fixed part, step by step")
    ap.add_argument("--statements", action="store_true", help="single statements")
    ap.add_argument("--calls", type=int, default=0, help="calls or loop iterations measured")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not installed (apt-get install valgrind): the counts are callgrind's")
    if a.statements:
        print("Redis instructions per statement (callgrind)")
        for label, n in statements(a.calls or 2000).items():
            print(f"  {label:46s} {n:9,.0f}")
    if a.steps:
        print(f"{SCRIPT[a.steps]}: Redis instructions per call, as a library function (FCALL)")
        last = 0.0
        for label, marker in STEPS[a.steps]:
            got = step_cost(a.steps, marker, a.calls or 200)
            print(f"  {label:52s} {got:10,.0f}  ({got - last:+9,.0f})", flush=True)
            last = got
    if not (a.statements or a.steps):
        ap.error("give --steps claim|ack, or --statements")


if __name__ == "__main__":
    main()
