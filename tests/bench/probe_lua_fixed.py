#!/usr/bin/env python3
"""What a script call costs before it does any work (not a test; by hand).

Every EVALSHA runs its script's whole text: the include units' top level (their
functions and tables, defined again on each call) and then the script's own checks. Two
views, both as EVALSHA µs per call from ``INFO commandstats`` (medians of ``--runs``),
against a private redis-server:

* ``units``: the units a script includes, added one by one to a script that returns at
  once (the first row is an empty script: the floor of any call);
* ``stops``: the script itself stopped early (``do return end`` inserted after the given
  lines of ``lua/NAME.lua``), called as a replica calls it with nothing due (``claim``
  only), so the rows show what each stretch of its fixed path costs.

    PYTHONPATH=. python tests/bench/probe_lua_fixed.py units claim
    PYTHONPATH=. python tests/bench/probe_lua_fixed.py stops claim 42 60 70 94 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402


def timed(r: redis.Redis, shas: dict[str, str], call: Callable[[str, int], object], runs: int):
    """EVALSHA µs per call of each script, interleaved run by run: name -> median."""
    out: dict[str, list[float]] = {name: [] for name in shas}
    for run in range(runs):
        for name, sha in shas.items():
            r.config_resetstat()
            for i in range(2000):
                call(sha, run * 2000 + i)
            out[name].append(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
    return {name: statistics.median(v) for name, v in out.items()}


def units(r: redis.Redis, name: str, runs: int) -> None:
    d = lua.lua_dir()
    order = lua.unit_order((d / f"{name}.lua").read_text(), f"{name}.lua")
    texts, acc = {"(empty script)": "#!lua\nreturn 1"}, "#!lua\n"
    for unit in order:
        acc += "\n" + (d / lua.INCLUDE_DIR / f"{unit}.lua").read_text()
        texts[f"+ {unit}"] = acc + "\nreturn 1"
    shas = {label: r.script_load(text) for label, text in texts.items()}
    prefix = "duetime:{probe}:"
    got = timed(r, shas, lambda sha, _i: r.evalsha(sha, 1, prefix + "x", prefix, ""), runs)
    last = None
    print(f"{name}.lua: its units' top level, added one by one (µs per call)")
    for label, us in got.items():
        step = "" if last is None else f"  ({us - last:+.1f})"
        print(f"  {label:24s} {us:6.1f}{step}")
        last = us


def stops(r: redis.Redis, url: str, name: str, lines: list[int], runs: int) -> None:
    if name != "claim":
        raise SystemExit("stops: only claim (called as a replica calls it, nothing due)")
    store = RedisStore(url, "probe")
    store.add(JobSpec("later", TaskRef("bench.noop"), After(3600)))
    request = store.claim_request({"default": 4}, 30.0, "o1")
    d = lua.lua_dir()
    own = (d / f"{name}.lua").read_text().split("\n")
    texts = {}
    for line in lines:
        text = [*own[:line], "do return 'stop' end", *own[line:]]
        texts[f"stop after line {line}"] = "\n".join(text)
    texts["the whole script"] = "\n".join(own)
    shas = {label: r.script_load(lua.assemble(t, f"{name}.lua", d)) for label, t in texts.items()}
    key, prefix = store.keys.prefix + "x", store.keys.prefix

    def call(sha: str, i: int) -> object:
        argv = list(request.argv)
        argv[1] = f"probe{i}"  # a fresh request id: never a resend
        return r.evalsha(sha, 1, key, prefix, "", *argv)

    print(f"{name}.lua stopped early, nothing due (µs per call)")
    for label, us in timed(r, shas, call, runs).items():
        print(f"  {label:24s} {us:6.1f}")
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("view", choices=("units", "stops"))
    ap.add_argument("script", help="a script name: claim, add, complete_many, ...")
    ap.add_argument("lines", nargs="*", type=int, help="stops: line numbers of lua/NAME.lua")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with EmbeddedRedis(appendonly=False) as server:
        r = redis.Redis.from_url(server.url)
        if a.view == "units":
            units(r, a.script, a.runs)
        else:
            stops(r, server.url, a.script, a.lines, a.runs)


if __name__ == "__main__":
    main()
