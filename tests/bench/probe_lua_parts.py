#!/usr/bin/env python3
"""Where a claimed job's Redis instructions go inside claim.lua (not a test; by hand).

Each variant is a copy of claim.lua (its units inlined) with some lines replaced (text
substitutions that must apply: a probe that no longer fits the scripts says which line
is gone), measured as ``probe_claim_instructions.measure(raw=True)`` measures one: a
redis-server under callgrind, ``--jobs`` one-off jobs due now claimed in calls of
``--batch`` (one lane, a lease), the server's whole work per job in instructions
(deterministic: other load on the box does not move them; ±0.3k between runs). The rows
are cumulative: the difference between two rows is what the piece between them costs per
job. A variant is not a correct script: these copies only say what a piece costs, they
are never shipped. Variants that stop before the due set is written see the same jobs
each call.

``--fixed``: the fixed part of a call, instructions per call: an EVALSHA of ``return 1``,
an FCALL of a function that returns 1 (Redis Functions, ``FUNCTION LOAD``), and an
EVALSHA of claim.lua's units alone (their top-level definitions, run again by every call).

``--ack``: the same for complete_many.lua, the acks of real claims (cut copies of the
ack; the claims are the checkout's): per job, what each piece of an ack costs.

``--functions``: the copies sent as the store sends scripts to Redis 7, each as the
function of its own library (``FCALL``): the units' definitions run once, when it is
loaded, and a row's step is what a piece costs per call as a replica pays it. Without it
(``EVALSHA``), every call also runs the units' top level (~280k a call), which a batch of
one shows in full.

    PYTHONPATH=. python tests/bench/probe_lua_parts.py [--jobs 2000] [--batch 50]
        [--only SUBSTRING] [--served t.x] [--fixed] [--ack] [--functions]
"""

from __future__ import annotations

import argparse
import glob
import os
import pathlib
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_add_ablate import callgrind_redis  # noqa: E402
from probe_claim_instructions import measure, summary  # noqa: E402

from scheduler.stores.redis.protocol import gateway  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402

Edit = tuple[str, str, str]  # (file under lua/, text as it is, what replaces it)

STOP = "do return 'stop' end\n"
# claim.lua's own steps
AFTER_UNITS = ("claim.lua", "--@include turns\n", "--@include turns\n" + STOP)
BEFORE_LANES = ("claim.lua", "-- 3. claim, lane", STOP + "-- 3. claim, lane")
AT_WRITE = ("claim.lua", "write_claims(b)\n", STOP)
BEFORE_ASK = ("claim.lua", "-- 4. when to ask", STOP + "-- 4. when to ask")
BEFORE_REPLY = ("claim.lua", "-- 5. the reply", STOP + "-- 5. the reply")
NO_RECORD = (
    "claim.lua",
    "return remember_reply(owner, table.concat(parts))",
    "return table.concat(parts)",
)
# the lane's round (include/inspect.lua): a plain one-off the short way (include/plain.lua)
SORT = "    local looks, members, parks, n = sort_round(b, lane, due)\n"
NO_SORT = ("include/inspect.lua", SORT, "    local looks, members, parks, n = {}, {}, {}, 0\n")
INSPECT = "    if not x then x = inspect(due[i], tonumber(due[i + 1]), raw) end\n"
NO_INSPECT = ("include/inspect.lua", INSPECT, "    x = x or {}\n")  # a cut look: no fallback
LOOK_READ = "  local def, st = raw[1], raw[2]\n"
LOOK_READ_ONLY = ("include/plain.lua", LOOK_READ, "  do return nil end\n")
ZREM = "    if #members > 0 then redis.call('ZREM', key, unpack(members)) end\n"
NO_WRITE = ("include/inspect.lua", ZREM, "    do return 0 end\n")
# the claim written (include/issue.lua: PLAIN.issue, hand_out)
PLAIN_ISSUE = "function PLAIN.issue(b, x)\n"
NO_PLAIN_ISSUE = ("include/issue.lua", PLAIN_ISSUE, PLAIN_ISSUE + "  do return true end\n")
HSET = "  redis.call('HSET', x.jk, 'st', PLAIN.claimed(x, '1'))\n"
NO_HSET = ("include/issue.lua", HSET, "")
EVENT = "  event_tallied(b.now, 'claimed',"
NO_EVENT = ("include/issue.lua", EVENT, "  local _ = false and event_tallied(b.now, 'claimed',")
RECORD = """  c[#c + 1] = s .. ' ' .. a .. ' ' .. fe .. ' ' .. gen .. ' ' .. (later or s) .. ' ' .. fmt(#job) ..
    ' ' .. fmt(#def) .. '\\n'
  c[#c + 1] = job
  c[#c + 1] = def
"""
NO_RECORD_LINE = ("include/issue.lua", RECORD, "")

LOOKED = [NO_INSPECT, NO_WRITE, AT_WRITE]  # the round decided, nothing written
WRITES = [NO_HSET, NO_EVENT, NO_RECORD_LINE]  # what PLAIN.issue writes but hand_out's lists

CLAIM: dict[str, list[Edit]] = {
    "units defined, core's checks (return after the includes)": [AFTER_UNITS],
    "+ input, resend lookup, namespace checks, reap, unpark": [BEFORE_LANES],
    "+ fetch the due members (ZRANGEBYSCORE WITHSCORES)": [NO_SORT, NO_WRITE, AT_WRITE],
    "+ PLAIN.look: the member matched, the job's HMGET": [LOOK_READ_ONLY, *LOOKED],
    "+ PLAIN.look: st matched and checked, the look's table": LOOKED,
    "+ ZREM (no claim written)": [NO_PLAIN_ISSUE, AT_WRITE],
    "+ hand_out: fence, token, RUNNING entry, lease lists": [AT_WRITE, *WRITES],
    "+ PLAIN.issue: the job's HSET": [AT_WRITE, NO_EVENT, NO_RECORD_LINE],
    "+ hand_out: its event line (event_tallied)": [AT_WRITE, NO_RECORD_LINE],
    "+ hand_out: its reply record": [AT_WRITE],
    "+ write_claims (fence, RUNNING, lease, XADD, HINCRBY)": [BEFORE_ASK],
    "+ ask_next, replica's SET, register_serves": [BEFORE_REPLY],
    "+ the reply joined (no resend record)": [NO_RECORD],
    "the whole script (+ the resend record's SET)": [],
}


# complete_many.lua (--ack): the acks of the claims measure() makes, cut likewise; a plain
# one-off's success the short way (include/plain.lua's PLAIN.acked)
ACK_UNITS = ("complete_many.lua", "--@include told\n", "--@include told\n" + STOP)
ACK_DECIDE = ("complete_many.lua", "-- 1. decide", STOP + "-- 1. decide")
ACK_WRITE = ("complete_many.lua", "-- 2. write", STOP + "-- 2. write")
ACK_TAKEN = ("complete_many.lua", "if #taken > 0 then", STOP + "if #taken > 0 then")
ACK_LISTED = ("complete_many.lua", "list_done(now, 'succeeded', retired)\n", STOP)
ACK_FLUSH = ("complete_many.lua", "flush_tally()\nreturn out", STOP)
ACKED_ENTRY = "#data - #job - #s - #a > 21 then return nil end\n"  # the last check of the entry
ACKED_ENTRY_ONLY = ("include/plain.lua", ACKED_ENTRY, ACKED_ENTRY + "  do return nil end\n")
ACK_NO_FALLBACK = ("complete_many.lua", "    if not x then\n", "    if false then\n")
ACK_EVENT = """  local line = s .. '|' .. a .. '||' .. job
  if not lines then return event_tallied(now, 'succeeded', job, s, a, '', nil, line) end
  lines[#lines + 1], one = line, one or {job, s, a}
"""
ACK_NO_EVENT = ("complete_many.lua", ACK_EVENT, "")
ACK_NO_EXPIRE = (
    "include/retire.lua",
    "  redis.call('PEXPIRE', jk, keep)\n  -- lists",
    "  -- lists",
)

ACK: dict[str, list[Edit]] = {
    "units defined, core's checks (return after the includes)": [ACK_UNITS],
    "+ input, namespace checks, RUNNING HMGET, lease ZCOUNT": [ACK_DECIDE],
    "+ PLAIN.acked: the RUNNING entry matched": [ACKED_ENTRY_ONLY, ACK_NO_FALLBACK, ACK_WRITE],
    "+ PLAIN.acked: the job's HMGET, st matched, its table": [ACK_NO_FALLBACK, ACK_WRITE],
    "+ succeed: the job's HSET (retire_success)": [ACK_NO_EXPIRE, ACK_NO_EVENT, ACK_TAKEN],
    "+ succeed: its PEXPIRE": [ACK_NO_EVENT, ACK_TAKEN],
    "+ succeed: its event line": [ACK_TAKEN],
    "+ RUNNING HDEL, lease ZREM, flow_end_many": [ACK_LISTED],
    "+ list_done (live count, done ZADD, trim), lines tallied": [ACK_FLUSH],
    "the whole script (+ flush_tally: XADD, HINCRBY)": [],
}


def variant(edits: Sequence[Edit], name: str = "claim", functions: bool = False) -> Any:
    """The assembled text of lua/``name``.lua with ``edits`` applied; ``functions``: as the
    store sends it on Redis 7 (``gateway.Lua`` with its Redis Functions library)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="lua-parts-")) / "lua"
    shutil.copytree(lua.lua_dir(), d)
    for rel, old, new in edits:
        p = d / rel
        text = p.read_text()
        if old not in text:
            raise SystemExit(f"{rel}: the text to replace is gone (update this probe): {old!r}")
        p.write_text(text.replace(old, new, 1))
    try:
        text = lua.assemble((d / f"{name}.lua").read_text(), f"{name}.lua", d)
        if not functions:
            return text
        fn, code = lua.library_of(name, d)
        return gateway.Lua(text, function=fn, library=code)
    finally:
        shutil.rmtree(d.parent)


FUNCTION = "#!lua name=probe\nredis.register_function('one', function() return 1 end)"


def fixed(calls: int) -> dict[str, float]:
    """Instructions per call: EVALSHA of `return 1`, FCALL of a function returning 1, and
    EVALSHA of claim.lua's units alone (their top level, then `return 1`)."""
    out = os.path.join(tempfile.mkdtemp(prefix="cg-fixed-"), "cg")
    units = variant([AFTER_UNITS])
    prefix = "duetime:{probe}:"
    rows = {}
    with callgrind_redis(out) as (client, control):
        one = client.script_load("return 1")
        whole = client.script_load(units)
        client.function_load(FUNCTION, replace=True)
        sends = {
            "EVALSHA of `return 1`": lambda: client.evalsha(one, 1, prefix + "x", prefix, ""),
            "FCALL of a function returning 1": lambda: client.fcall("one", 1, prefix + "x"),
            "EVALSHA of claim.lua's units (top level only)": lambda: client.evalsha(
                whole, 1, prefix + "x", prefix, "", "o", "rq", "30000", "*", "", "default", "50"
            ),
        }
        for label, send in sends.items():
            for _ in range(50):
                send()
            control("-z")
            for _ in range(calls):
                send()
            control("-d")
            dumps = [f for f in glob.glob(out + ".*") if re.search(r"\.\d+$", f)]
            last = max(dumps, key=lambda f: int(f.rsplit(".", 1)[1]))
            rows[label] = summary(last) / calls
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--only", action="append", default=[], help="variants whose label has it")
    ap.add_argument("--served", action="append", help="the claimant's tasks (default: every)")
    ap.add_argument("--fixed", action="store_true", help="the fixed part of a call instead")
    ap.add_argument("--ack", action="store_true", help="complete_many.lua's pieces instead")
    ap.add_argument(
        "--functions", action="store_true", help="copies sent as Redis Functions libraries"
    )
    a = ap.parse_args()
    if a.fixed:
        print("Redis instructions per call (the fixed part)")
        for label, n in fixed(1000).items():
            print(f"  {label:52s} {n:10,.0f}")
        return
    name, rows = ("complete_many", ACK) if a.ack else ("claim", CLAIM)
    chosen = {k: v for k, v in rows.items() if not a.only or any(s in k for s in a.only)}
    texts = {k: variant(v, name, a.functions) for k, v in chosen.items()}  # each one applies
    print(f"{name}.lua: Redis instructions per job ({a.jobs} one-off jobs, {a.batch} per call;")
    sent = "functions (FCALL)" if a.functions else "scripts (EVALSHA)"
    print(f"  tasks served: {'every' if a.served is None else ', '.join(a.served)}; {sent})")
    last = None
    for label, text in texts.items():
        if a.ack:
            m = measure({name: text}, a.jobs, a.batch, served=a.served, acks_ok=False)
            got = m["ack"]
        else:
            got = measure({name: text}, a.jobs, a.batch, raw=True, served=a.served)["claim"]
        step = "" if last is None else f"  ({got - last:+8,.0f})"
        print(f"  {label:56s} {got:9,.0f}{step}", flush=True)
        last = got


if __name__ == "__main__":
    main()
