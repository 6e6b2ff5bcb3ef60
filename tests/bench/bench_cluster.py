#!/usr/bin/env python3
"""Claims per second with 1 shard vs 16 shards, on one Redis and on a 3-master Redis
Cluster (all on this machine's loopback).

Not part of the test run; see tests/bench/README.md ("Redis Cluster and shards"). Needs
redis-server and redis-cli (the cluster is tests/cluster_fixtures.py's LocalCluster, so
pytest must be importable). Typical use, from a checkout:

    PYTHONPATH=$PWD .venv/bin/python tests/bench/bench_cluster.py --runs 3

Per setup (``redis``: one private redis-server; ``cluster``: three cluster-enabled
masters; AOF off, so the figures are Redis's and the scripts', not the disk's), shard
count (1, 16) and run: a fresh namespace gets ``--jobs`` one-off jobs, all due now
(``Client.enqueue_many``), then ``--procs`` claimer processes start together and claim
until every shard is empty. claims/s = jobs / (last claimer done - start).

* ``raw`` (default) -- each claimer calls claim.lua directly (EVALSHA, batches of 100,
  lease 300 s), visiting the shards round-robin from its own starting shard, and counts
  the claims in the reply without decoding it: Redis's and the script's throughput.
* ``store`` -- each claimer calls ``claim_due({"default": 100})`` of a ``RedisStore`` /
  ``ShardedStore`` (reply decoded into ``Claim`` objects): what a replica's dispatcher
  can claim.

Redis CPU per 1,000 claims is INFO cpu (used_cpu_sys + used_cpu_user, every node) over
the claim phase. On the cluster each run's line also shows how many shards each node
holds: the namespace is new every run and the shards' tags hash to random slots, so the
spread (e.g. 7/5/4 or 9/4/3 for 16 shards) varies from run to run. The box is a shared 2-core machine: with 3 cluster nodes plus the
claimers, the processes compete for two cores, so read the cluster figures as "on one
small machine", not as what three machines would do.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for _p in (ROOT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _common import script_calls  # noqa: E402

from scheduler.client import Client  # noqa: E402
from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402
from scheduler.stores.redis.protocol import urls  # noqa: E402
from scheduler.stores.redis.protocol.keys import Keys  # noqa: E402
from scheduler.stores.redis.sharding.sharded import open_store  # noqa: E402

BATCH = 100


def claims_in(reply: bytes) -> int:
    """Claims in a claim.lua reply, without decoding them: JSON before issue 15 (one
    ``"j":`` per claim), flat text since (the count is the fifth number of line 2)."""
    if reply[:1] in (b"{", b"["):
        return reply.count(b'"j":')
    return int(reply.split(b"\n", 2)[1].split()[4])


def claimer(url: str, ns: str, shards: int, index: int, mode: str, go: Any, out: Any) -> None:
    """One claiming process: claims until every shard is empty; reports (claims, end)."""
    owner = f"bench-{index}-{uuid.uuid4().hex[:6]}"
    count = 0
    if mode == "raw":
        r = urls.connect(url, decode_responses=False)
        sha = r.script_load(lua.source("claim"))
        keys = [Keys(ns, i, shards) for i in range(shards)]
        live = set(range(shards))
        k = index
        go.wait()
        while live:
            s = k % shards
            k += 1
            if s not in live:
                continue
            reply = r.evalsha(
                sha,
                1,
                keys[s].epoch,
                keys[s].prefix,
                "",
                owner,
                uuid.uuid4().hex,
                "300000",
                "default",
                str(BATCH),
            )
            n = claims_in(reply)
            if n == 0:
                live.discard(s)
            count += n
    else:
        store = open_store(url, ns, shards=shards, lease=300)
        go.wait()
        while True:
            got = len(store.claim_due({"default": BATCH}, 300, owner).claims)
            if got == 0:
                break
            count += got
    out.put((count, time.time()))


def redis_cpu(clients: list[Any]) -> float:
    total = 0.0
    for c in clients:
        info = c.info("cpu")
        total += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return total


def one_run(
    setup: str, url: str, nodes: list[Any], shards: int, jobs: int, procs: int, mode: str
) -> dict[str, Any]:
    for c in nodes:
        c.flushall()
    ns = f"b{uuid.uuid4().hex[:6]}"
    surl = f"{url}{'/' if setup == 'cluster' else ''}?shards={shards}"
    with Client(surl, namespace=ns) as client:
        for start in range(0, jobs, 2000):
            client.enqueue_many({"task": "bench.noop"} for _ in range(min(2000, jobs - start)))
    time.sleep(0.05)  # every job due (they were due "now" when stored)
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    ps = [
        ctx.Process(target=claimer, args=(surl, ns, shards, i, mode, go, out)) for i in range(procs)
    ]
    for p in ps:
        p.start()
    time.sleep(1.0)  # connections made and scripts loaded before the start
    cpu0 = redis_cpu(nodes)
    t0 = time.time()
    go.set()
    results = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(60)
    cpu = redis_cpu(nodes) - cpu0
    claimed = sum(n for n, _ in results)
    if claimed != jobs:
        raise SystemExit(f"{setup}/{shards}: claimed {claimed} of {jobs} jobs")
    wall = max(end for _, end in results) - t0
    spread = ""
    if setup == "cluster":  # how many shards each node holds (the tags' slots are random)
        rc = urls.connect(url)
        per = [rc.get_node_from_key(Keys(ns, i, shards).epoch).port for i in range(shards)]
        spread = "/".join(
            str(n)
            for n in sorted(
                (per.count(p) for p in {n.port for n in rc.get_primaries()}), reverse=True
            )
        )
        rc.close()
    return {
        "claims_per_s": jobs / wall,
        "wall_s": wall,
        "redis_cpu_ms_per_1k": cpu * 1000 / (jobs / 1000),
        "spread": spread,
    }


def idle_cost(url: str, nodes: list[Any], shards: int, seconds: float, resync: float) -> float:
    """Script calls per second of one idle replica (an engine with nothing due)."""
    from scheduler.engine import Scheduler

    def calls() -> int:
        return sum(script_calls(c.info("commandstats")) for c in nodes)

    ns = f"i{uuid.uuid4().hex[:6]}"
    store = open_store(f"{url}?shards={shards}", ns, resync=resync)
    with Scheduler(1, store=store):
        time.sleep(2.0)  # the start-up sweep
        before = calls()
        time.sleep(seconds)
        after = calls()
    store.close()
    return (after - before) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--setups", nargs="+", default=["redis", "cluster"])
    ap.add_argument("--mode", choices=["raw", "store"], default="raw")
    ap.add_argument("--json", default=None, help="also write every run's figures here")
    ap.add_argument(
        "--idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="instead: script calls/s of one idle replica (--resync 5) over "
        "SECONDS, per shard count, on one Redis",
    )
    args = ap.parse_args()
    import redis

    from tests.cluster_fixtures import LocalCluster

    if args.idle:
        with EmbeddedRedis(appendonly=False) as server:
            node = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
            for shards in args.shards:
                rate = idle_cost(server.url, [node], shards, args.idle, 5.0)
                print(f"shards={shards:<3} idle replica: {rate:.2f} script calls/s")
        return
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for setup in args.setups:
        if setup == "redis":
            server: Any = EmbeddedRedis(appendonly=False).start()
            url, ports = server.url, [server.port]
        else:
            server = LocalCluster()
            url, ports = server.url, [n.port for n in server.nodes]
        nodes = [redis.Redis(host="127.0.0.1", port=p) for p in ports]
        try:
            for run in range(args.runs):
                for shards in args.shards:
                    fig = one_run(setup, url, nodes, shards, args.jobs, args.procs, args.mode)
                    rows.setdefault((setup, shards), []).append(fig)
                    print(
                        f"{setup:8} shards={shards:<3} run {run + 1}: "
                        f"{fig['claims_per_s']:>9,.0f} claims/s  "
                        f"redis cpu {fig['redis_cpu_ms_per_1k']:.1f} ms/1k"
                        f"{'  shards per node ' + str(fig['spread']) if fig['spread'] else ''}",
                        file=sys.stderr,
                    )
        finally:
            for c in nodes:
                c.close()
            if setup == "redis":
                server.stop()
            else:
                server.close()
    print(
        f"\nmode {args.mode}, {args.jobs:,} jobs, {args.procs} claimer processes, batches "
        f"of {BATCH}, medians of {args.runs} run(s) (min-max)\n"
    )
    print("| setup | shards | claims/s | Redis CPU ms per 1k claims |")
    print("| --- | ---: | ---: | ---: |")
    for (setup, shards), figs in rows.items():
        rates = [f["claims_per_s"] for f in figs]
        cpu = statistics.median(f["redis_cpu_ms_per_1k"] for f in figs)
        print(
            f"| {setup} | {shards} | {statistics.median(rates):,.0f} "
            f"({min(rates):,.0f}-{max(rates):,.0f}) | {cpu:.1f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": vars(args), "runs": {f"{s}/{n}": v for (s, n), v in rows.items()}},
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
