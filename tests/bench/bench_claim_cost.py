"""Redis-side cost of claim.lua and of complete_many.lua (batched acks), measured inside
Redis: INFO commandstats gives the scripts' time (µs per EVALSHA) and the commands they
ran (Redis counts a script's own calls per command); INFO cpu gives the CPU time of
Redis's main thread over each phase (time on the CPU only, so a busy box inflates it less
than the EVALSHA time; it also holds reading the calls and writing the replies).

    PYTHONPATH=. python tests/bench/bench_claim_cost.py [--jobs 2000] [--runs 5]
        [--against b48b9ed [--against cb42fce ...]]

Each run: a private redis-server, N one-off jobs due now, then claims of 1 and of 100
jobs per call until none is left, then acks of every claim, 200 per complete_many call
(statistics reset between the two phases). With ``--against REV`` (repeatable) the
scripts of git revision REV run too, alternating with this checkout's run by run (a
shared box is noisy: compare the columns, not the figures across machines). Prints
medians over the runs: µs of EVALSHA time per call and per job, commands per call, and
CPU µs of Redis's main thread per job, for the claims and for the acks.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.claiming.claim_reply import claim_reply  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402
from scheduler.testing import FakeClock  # noqa: E402


def sources(rev: str | None) -> dict[str, str]:
    """claim.lua and complete_many.lua as Redis runs them, from this checkout or from git
    revision ``rev``."""
    if rev is None:
        return {name: lua.source(name) for name in ("claim", "complete_many")}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="duetime-bench-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "lua"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    d = tmp / "lua"
    return {
        name: lua.assemble((d / f"{name}.lua").read_text(), f"{name}.lua", d)
        for name in ("claim", "complete_many")
    }


def claimed(reply: str) -> list[tuple[str, str]]:
    """(job id, token) of each claim of a claim.lua reply: the flat reply (claiming/claim_reply.py), or
    the JSON reply of revisions before it."""
    if reply.startswith("{"):
        return [(c["j"], c["t"]) for c in json.loads(reply)["claims"] or []]
    return [(c[0], f"bench:{c[3]}") for c in claim_reply(reply).claims]


def main_cpu(client: redis.Redis) -> float:
    """CPU seconds of Redis's main thread (user + system; time on the CPU only)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"] + cpu["used_cpu_sys_main_thread"])


def cost(client: redis.Redis, calls: int, jobs: int, cpu: float) -> dict[str, float]:
    stats = {k.removeprefix("cmdstat_"): v for k, v in client.info("commandstats").items()}
    evalsha = stats["evalsha"]
    inner = sum(v["calls"] for k, v in stats.items() if k not in ("evalsha", "info"))
    return {
        "us_per_call": evalsha["usec"] / evalsha["calls"],
        "us_per_job": evalsha["usec"] / max(1, jobs),
        "cpu_per_job": cpu * 1e6 / max(1, jobs),
        "cmds_per_call": inner / calls,
    }


def one_run(client: redis.Redis, scripts: dict[str, str], jobs: int, per_call: int) -> dict:
    store = RedisStore(client, f"b{uuid.uuid4().hex[:8]}", clock=FakeClock(1000.0))
    store.add_many([JobSpec(f"j{i}", TaskRef("bench.noop"), After(0)) for i in range(jobs)])
    claim_sha = client.script_load(scripts["claim"])
    ack_sha = client.script_load(scripts["complete_many"])
    client.config_resetstat()
    cpu = main_cpu(client)
    calls, got = 0, []
    while True:
        reply = client.evalsha(
            claim_sha, 1, store.keys.epoch, store.keys.prefix, "1000000", "bench",
            uuid.uuid4().hex, "30000", "*", "", "default", str(per_call),
        )  # fmt: skip
        calls += 1
        batch = claimed(reply)
        got += batch
        if not batch:
            break
    claims = cost(client, calls, len(got), main_cpu(client) - cpu)
    client.config_resetstat()
    cpu, acks = main_cpu(client), 0
    for i in range(0, len(got), 200):
        args = [x for job, token in got[i : i + 200] for x in (job, token, "null")]
        codes = client.evalsha(ack_sha, 1, store.keys.epoch, store.keys.prefix, "1001000", *args)
        assert set(codes) == {"ok"}, set(codes)
        acks += 1
    return {"claim": claims, "ack": cost(client, acks, len(got), main_cpu(client) - cpu)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--against", action="append", default=[], help="a git revision whose scripts run too"
    )
    a = ap.parse_args()
    versions = {"this checkout": sources(None)}
    for rev in a.against:
        versions[rev] = sources(rev)
    with EmbeddedRedis(appendonly=False) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for per_call in (1, 100):
            runs: dict[str, list[dict]] = {v: [] for v in versions}
            for _ in range(a.runs):
                for name, scripts in versions.items():
                    runs[name].append(one_run(client, scripts, a.jobs, per_call))
            for name, got in runs.items():
                for phase in ("claim", "ack"):
                    med = {k: statistics.median(r[phase][k] for r in got) for k in got[0][phase]}
                    what = f"claim {per_call:>3}/call" if phase == "claim" else "acks  200/call"
                    print(
                        f"{name:>14}  {what}: {med['us_per_call']:7.1f} µs/call "
                        f"{med['us_per_job']:6.1f} µs/job  {med['cmds_per_call']:6.1f} cmds/call  "
                        f"main thread {med['cpu_per_job']:6.1f} µs CPU/job"
                    )


if __name__ == "__main__":
    main()
