"""Where a claimed-and-acked job's Redis time goes inside claim.lua and complete_many.lua:
ablations, each a copy of the assembled scripts with one piece stubbed out (a text
substitution that must apply), run alternately with the real scripts, run by run.

    PYTHONPATH=. python tests/bench/bench_lua_ablate.py [--jobs 4000] [--runs 7]
        [--only NAME ...]

Each run: a private redis-server, N one-off jobs due now, claims of 100 per call until none
is left, then acks of every claim, 200 per complete_many call. Prints, per variant, the
medians of the CPU µs of Redis's main thread per job (INFO cpu) and of the EVALSHA µs per
job (INFO commandstats; inflated on a busy box), for claims and acks, with the difference
from the real scripts. A stubbed script is not a correct one: these copies only say what a
piece costs (its upper bound), they are never shipped. A variant that changes what the
claim leaves behind (no job HSET) changes the acks' path too: read its claim column only.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402
from scheduler.testing import FakeClock  # noqa: E402

Subs = list[tuple[str, str]]
STOP = "  do return end\n"
CHECK = "      if not (RULE[name] or sized)(v) then return 'malformed job data: ' .. field_problem(name, v) end\n"  # noqa: E501
EVENT = "local function event_tallied(now, kind, job, sched, attempt, detail, ready, line)\n"
CLAIM_READ = "  local f, why, t = read_job(m.job, CLAIM_FIELDS)\n"
CLAIM_CONST = (
    "  local why, t\n  local f = {gen = '1', e = string.sub(member, 1, 12), kind = 'after', "
    'def = \'{"s":["after",0],"t":"bench.noop"}\', next = \'1000000\', running = \'0\', '
    "retries = '0'}\n"
)
ACK_READ = "  local f, why, t = read_job(job, COMMIT_FIELDS)\n"
ACK_CONST = (
    "  local why, t\n  local f = {gen = '1', e = '', kind = 'after', running = '1', "
    "retries = '0', lane = 'default'}\n"
)
CLAIM_FIELDS = (
    "local CLAIM_FIELDS = {'gen', 'cancelled', 'e', 'paused', 'kind', 'def', 'running', 'next',\n"
    "  'retries', 'ready'}"
)
COMMIT_FIELDS = (
    "local COMMIT_FIELDS = {'gen', 'cancelled', 'lane', 'queued', 'paused', 'kind', 'e', "
    "'retries',\n  'running', 'runs', 'failures', 'lists', 'started'}"
)
RECORD = (
    "  c[#c + 1] = s .. ' ' .. a .. ' ' .. fe .. ' ' .. gen .. ' ' .. (later or s) .. ' ' .. "
    "fmt(#job) ..\n    ' ' .. fmt(#def) .. '\\n'\n  c[#c + 1] = job\n  c[#c + 1] = def\n"
)
PARSE_RUNNING = "local function parse_running(data)\n"
RUNNING_CONST = (
    "  do return {gen = '1', sched = 1000000, attempt = 1, stalls = 0, fence = 1, "
    "job = string.match(data, '([^|]*)$')} end\n"
)
RETIRE = "local function retire_success(now_s, jk, job, token, result, f)\n"
LIST_DONE = "local function list_done(now, outcome, scored)\n"

# name -> (claim.lua substitutions, complete_many.lua substitutions)
VARIANTS: dict[str, tuple[Subs, Subs]] = {
    "the real scripts": ([], []),
    "field checks off": ([(CHECK, "")], [(CHECK, "")]),
    "absent fields not asked": (
        [(CLAIM_FIELDS, "local CLAIM_FIELDS = {'gen', 'e', 'kind', 'def', 'next', 'running'}")],
        [(COMMIT_FIELDS, "local COMMIT_FIELDS = {'gen', 'kind', 'e', 'running', 'retries', 'lane'}")],
    ),
    "job read off (fields a constant)": ([(CLAIM_READ, CLAIM_CONST)], [(ACK_READ, ACK_CONST)]),
    "event entries off": ([(EVENT, EVENT + STOP)], [(EVENT, EVENT + STOP)]),
    "lease zset writes off": (
        [("  if #b.lease_add > 0 then redis.call('ZADD', P .. 'lease', unpack(b.lease_add)) end\n", "")],
        [("  redis.call('ZREM', P .. 'lease', unpack(taken))\n", "")],
    ),
    "claim: job HSET off": ([("    redis.call('HSET', jk, 'running', running, 'attempts', a, ...)\n", "")], []),
    "claim: reply records off": ([(RECORD, "")], []),
    "ack: RUNNING entry parse off": ([], [(PARSE_RUNNING, PARSE_RUNNING + RUNNING_CONST)]),
    "ack: HSET + PEXPIRE off": ([], [(RETIRE, RETIRE + STOP)]),
    "ack: PEXPIRE off": ([], [("  redis.call('PEXPIRE', jk, RETENTION_MS)\n  -- lists", "  -- lists")]),
    "ack: done:succeeded listing off": ([], [(LIST_DONE, LIST_DONE + STOP)]),
}  # fmt: skip


def stubbed(text: str, subs: Subs) -> str:
    for old, new in subs:
        assert old in text, f"the ablation no longer matches the scripts: {old!r}"
        text = text.replace(old, new)
    return text


def main_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"] + cpu["used_cpu_sys_main_thread"])


def evalsha_usec(client: redis.Redis) -> float:
    return float(client.info("commandstats").get("cmdstat_evalsha", {"usec": 0})["usec"])


def one_run(client: redis.Redis, claim: str, ack: str, jobs: int) -> dict[str, float]:
    store = RedisStore(client, f"b{uuid.uuid4().hex[:8]}", clock=FakeClock(1000.0))
    store.add_many([JobSpec(f"j{i}", TaskRef("bench.noop"), After(0)) for i in range(jobs)])
    claim_sha, ack_sha = client.script_load(claim), client.script_load(ack)
    due, running = store.keys.prefix + "due:default", store.keys.prefix + "running"
    client.config_resetstat()
    cpu = main_cpu(client)
    while True:
        left = client.zcard(due)
        client.evalsha(
            claim_sha, 1, store.keys.epoch, store.keys.prefix, "1000000", "bench",
            uuid.uuid4().hex, "30000", "*", "", "default", "100",
        )  # fmt: skip
        if client.zcard(due) == left:
            break
    out = {"claim cpu": main_cpu(client) - cpu, "claim usec": evalsha_usec(client)}
    claimed = jobs - client.zcard(due)
    pairs = [
        (v.split("|", 5)[5], t) for t, v in client.hgetall(running).items() if v.count("|") >= 5
    ]
    client.config_resetstat()
    cpu = main_cpu(client)
    for i in range(0, len(pairs), 200):
        args = [x for job, token in pairs[i : i + 200] for x in (job, token, "null")]
        client.evalsha(ack_sha, 1, store.keys.epoch, store.keys.prefix, "1001000", *args)
    out["ack cpu"], out["ack usec"] = main_cpu(client) - cpu, evalsha_usec(client)
    client.flushall()
    for k in out:
        out[k] = (
            out[k] * (1e6 if "cpu" in k else 1) / max(1, claimed if "claim" in k else len(pairs))
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", nargs="+", choices=list(VARIANTS), metavar="NAME")
    a = ap.parse_args()
    names = ["the real scripts", *[n for n in a.only or VARIANTS if n != "the real scripts"]]
    base = {name: lua.source(name) for name in ("claim", "complete_many")}
    texts = {
        n: (stubbed(base["claim"], VARIANTS[n][0]), stubbed(base["complete_many"], VARIANTS[n][1]))
        for n in names
    }
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with EmbeddedRedis(appendonly=False) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for _ in range(a.runs):
            for n in names:
                runs[n].append(one_run(client, *texts[n], a.jobs))
    med = {n: {k: statistics.median(r[k] for r in runs[n]) for k in runs[n][0]} for n in names}
    ref = med["the real scripts"]
    print(
        f"{'µs per job (medians of ' + str(a.runs) + ')':34} claim CPU (Δ)   ack CPU (Δ)   claim / ack EVALSHA"
    )
    for n in names:
        m = med[n]
        print(
            f"{n:34} {m['claim cpu']:5.1f} ({m['claim cpu'] - ref['claim cpu']:+5.1f})  "
            f"{m['ack cpu']:5.1f} ({m['ack cpu'] - ref['ack cpu']:+5.1f})  "
            f"{m['claim usec']:5.1f} / {m['ack usec']:5.1f}"
        )


if __name__ == "__main__":
    main()
