"""Redis-side cost of one claim.lua call, measured inside Redis: INFO commandstats gives
the script's CPU time (µs per EVALSHA) and the commands the script ran (Redis counts a
script's own calls per command).

    PYTHONPATH=. python tests/bench/bench_claim_cost.py [--jobs 2000] [--runs 5]
        [--against b48b9ed]

Each run: a private redis-server, N one-off jobs due now, then claims of 1 and of 100
jobs per call until none is left. With ``--against REV`` the claim.lua of git revision REV
runs too, alternating with this checkout's run by run (a shared box is noisy: compare
the two columns, not the figures across machines). Prints medians over the runs: µs of
Redis CPU per claim call and per job claimed, commands per call.
"""

from __future__ import annotations

import argparse
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
from scheduler.stores.redis import scripts as lua  # noqa: E402
from scheduler.testing import FakeClock  # noqa: E402


def claim_source(rev: str | None) -> str:
    """claim.lua as Redis runs it, from this checkout or from git revision ``rev``."""
    if rev is None:
        return lua.source("claim")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="duetime-bench-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "lua"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    d = tmp / "lua"
    return lua.assemble((d / "claim.lua").read_text(), "claim.lua", d)


def one_run(client: redis.Redis, script: str, jobs: int, per_call: int) -> dict[str, float]:
    store = RedisStore(client, f"b{uuid.uuid4().hex[:8]}", clock=FakeClock(1000.0))
    store.add_many([JobSpec(f"j{i}", TaskRef("bench.noop"), After(0)) for i in range(jobs)])
    sha = client.script_load(script)
    client.config_resetstat()
    calls = claimed = 0
    while True:
        reply = client.evalsha(
            sha, 1, store.keys.epoch, store.keys.prefix, "1000000", "bench",
            uuid.uuid4().hex, "30000", "default", str(per_call),
        )  # fmt: skip
        calls += 1
        n = reply.count('"j":')
        claimed += n
        if not n:
            break
    stats = {k.removeprefix("cmdstat_"): v for k, v in client.info("commandstats").items()}
    evalsha = stats["evalsha"]
    inner = sum(v["calls"] for k, v in stats.items() if k not in ("evalsha", "info"))
    return {
        "us_per_call": evalsha["usec"] / evalsha["calls"],
        "us_per_job": evalsha["usec"] / max(1, claimed),
        "cmds_per_call": inner / calls,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--against", help="a git revision whose claim.lua runs too")
    a = ap.parse_args()
    versions = {"this checkout": claim_source(None)}
    if a.against:
        versions[a.against] = claim_source(a.against)
    with EmbeddedRedis(appendonly=False) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for per_call in (1, 100):
            runs: dict[str, list[dict[str, float]]] = {v: [] for v in versions}
            for _ in range(a.runs):
                for name, script in versions.items():
                    runs[name].append(one_run(client, script, a.jobs, per_call))
            for name, got in runs.items():
                med = {k: statistics.median(r[k] for r in got) for k in got[0]}
                print(
                    f"{name:>14}  claim {per_call:>3}/call: {med['us_per_call']:7.1f} µs/call "
                    f"{med['us_per_job']:6.1f} µs/job  {med['cmds_per_call']:6.1f} cmds/call"
                )


if __name__ == "__main__":
    main()
