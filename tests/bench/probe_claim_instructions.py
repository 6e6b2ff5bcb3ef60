#!/usr/bin/env python3
"""Redis instructions per claimed and per acknowledged one-off job (not a test; by hand).

A redis-server runs under valgrind's callgrind; ``--jobs`` one-off jobs due now are
claimed in calls of ``--batch`` (claim.lua, as a replica claims: one lane, a lease), then
acknowledged in calls of ``--batch`` (complete_many.lua). The counters are zeroed after a
warm-up and dumped after the claims and after the acks, so each figure is the server's
whole work for those calls (network, parsing, the script), divided by the jobs.
Instruction counts are deterministic: they are not disturbed by other load on this box,
which moves CPU times by a third within an hour.

``--before DIR`` (another checkout, e.g. a ``git archive`` of main): its claim.lua and
complete_many.lua are measured too, by the same client code (the scripts' arguments and
replies must be the same in both trees), on a server of their own, sent as scripts
(``EVALSHA``). This checkout's are sent as the gateway sends them (``FCALL`` of their
libraries on Redis 7); ``--scripts`` measures them sent as scripts too.

    PYTHONPATH=. python tests/bench/probe_claim_instructions.py --jobs 2000 --batch 50 \\
        --before "$before" [--kind plain|keyed|limited]
"""

from __future__ import annotations

import argparse
import glob
import os
import pathlib
import re
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_add_ablate import callgrind_redis, whole  # noqa: E402

from scheduler import flow  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.claiming import acked_claims  # noqa: E402
from scheduler.stores.redis.protocol import gateway  # noqa: E402

NAMES = ("claim", "complete_many")


def summary(path: str) -> int:
    m = re.search(r"^summary: (\d+)", pathlib.Path(path).read_text(), re.M)
    assert m, f"no callgrind summary in {path}"
    return int(m.group(1))


#: --kind: what the jobs carry (docs/flow-control.md): nothing; one limit key, no limit
#: declared; one key under a rate limit that never binds (10,000 starts per ms)
KINDS = ("plain", "keyed", "limited")


def measure(
    texts: dict[str, str | gateway.Lua] | None,
    jobs: int,
    batch: int,
    warm: int = 300,
    raw: bool = False,
    kind: str = "plain",
    served: list[str] | None = None,
    acks_ok: bool = True,
    scripts_only: bool = False,
) -> dict[str, float]:
    """Instructions per job of the claims and of the acks (``texts``: the two scripts to
    use instead of this checkout's, sent as scripts, or as functions where one is a
    ``gateway.Lua`` with its library; ``raw``: claims only, their replies not read, so that
    a cut claim.lua can be measured: each call then sees the same due jobs; ``kind``: KINDS;
    ``served``: the claimant names these tasks, task-aware claiming, as a worker does;
    None: "*"; ``acks_ok``: every ack must answer "ok" (False: a cut complete_many.lua);
    ``scripts_only``: sent as scripts (EVALSHA) even where the server has Redis Functions)."""
    out = os.path.join(tempfile.mkdtemp(prefix="cg-claim-"), "cg")
    with callgrind_redis(out) as (client, control):
        store = RedisStore(client, "p1")
        store._upkeep_at = float("inf")  # no reconciler pass inside the measured calls
        if scripts_only:
            gateway.send_scripts(client)
        if served is not None:
            store.serve(lambda: (1, served))
        for name, text in (texts or {}).items():  # a cut copy: a script, or a library
            store._scripts[name] = text if isinstance(text, gateway.Lua) else gateway.Lua(text)
        if kind == "limited":
            store.set_limit("k", flow.limit(rate=flow.RATE_MAX, per=0.001))
        key = None if kind == "plain" else "k"
        for i in range(0, warm + jobs, 500):
            n = min(500, warm + jobs - i)
            store.add_many(
                [
                    JobSpec(f"j{k:08d}", TaskRef("t.x", '{"i":1}'), After(0), limit_key=key)
                    for k in range(i, i + n)
                ]
            )

        claim = store._scripts["claim"]  # raw: EVALSHA, or FCALL of a cut copy's library
        as_function = isinstance((texts or {}).get("claim"), gateway.Lua) and claim.library
        client.script_load(claim.script)
        if as_function:
            client.function_load(claim.library, replace=True)

        def run(n: int) -> list[Any]:
            claims: list[Any] = []
            if raw:
                script = store._scripts["claim"]
                for c in range(n // batch):
                    argv = list(store.claim_request({"default": batch}, 30.0, "o").argv)
                    argv[1] = f"rq{c}"  # a fresh request id: never a resend
                    keys = (store.keys.epoch, store.keys.prefix, "")
                    if as_function:  # a library (probe_lua_parts --functions)
                        client.fcall(script.function, 1, *keys, *argv)
                    else:
                        client.evalsha(script.sha, 1, *keys, *argv)
                return [None] * n
            while len(claims) < n:
                want = {"default": min(batch, n - len(claims))}
                claims += store.claim_due(want, 30.0, "o").claims
            return claims

        def ack(claims: list[Any]) -> None:
            for i in range(0, 0 if raw else len(claims), batch):
                done = [(c, None) for c in claims[i : i + batch]]
                codes = store.call_script("complete_many", *acked_claims.ack_args(done))
                assert not acks_ok or all(c == "ok" for c in codes), codes

        ack(run(warm))
        control("-z")
        claims = run(jobs)
        control("-d")
        assert len(claims) == jobs
        control("-z")
        ack(claims)
        control("-d")
    dumps = sorted(f for f in glob.glob(out + ".*") if re.search(r"\.\d+$", f))
    dumps.sort(key=lambda f: int(f.rsplit(".", 1)[1]))
    claim_i, ack_i = summary(dumps[-2]), summary(dumps[-1])
    return {"claim": claim_i / jobs, "ack": ack_i / jobs, "both": (claim_i + ack_i) / jobs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--before", metavar="DIR")
    ap.add_argument("--raw", action="store_true", help="claims only, replies not read (cuts)")
    ap.add_argument("--kind", choices=KINDS, default="plain", help="what the jobs carry")
    ap.add_argument("--scripts", action="store_true", help="this checkout as scripts too")
    a = ap.parse_args()
    rows = {}
    if a.before:
        texts = {n: whole(a.before, n) for n in NAMES}
        rows["before"] = measure(texts, a.jobs, a.batch, raw=a.raw, kind=a.kind)
    if a.scripts:
        rows["scripts"] = measure(None, a.jobs, a.batch, raw=a.raw, kind=a.kind, scripts_only=True)
    rows["this"] = measure(None, a.jobs, a.batch, raw=a.raw, kind=a.kind)
    print(f"Redis instructions per job ({a.jobs} one-off {a.kind} jobs, {a.batch} per call)")
    print(f"{'':8s} {'claim':>10s} {'ack':>10s} {'both':>10s}")
    for label, r in rows.items():
        print(f"{label:8s} {r['claim']:10,.0f} {r['ack']:10,.0f} {r['both']:10,.0f}")
    if a.before:
        b, t = rows["before"], rows["this"]
        print(f"{'ratio':8s} " + " ".join(f"{t[k] / b[k]:10.3f}" for k in ("claim", "ack", "both")))


if __name__ == "__main__":
    main()
