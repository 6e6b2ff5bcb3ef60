"""Where an add's Redis time goes inside add.lua: cut points, each a copy of the assembled
script that returns right after one piece (a text substitution that must apply), so the
difference between two cuts is what the piece between them costs.

    PYTHONPATH=. python tests/bench/bench_add_ablate.py [--batch 1] [--jobs 2000] [--runs 3]
    PYTHONPATH=. python tests/bench/bench_add_ablate.py --callgrind [--batch 50]
    PYTHONPATH=. python tests/bench/bench_add_ablate.py --callgrind --before DIR  # whole scripts

``--before DIR`` (another checkout, e.g. a ``git archive`` of main): instead of the cuts,
that checkout's whole add.lua beside this one's, both sent as scripts (EVALSHA), and this
one's as the gateway sends it on Redis 7 (FCALL of its library: its units built at load).

Each run: a private redis-server, new one-off jobs due in 2 h (they stay pending), one
add.lua call per job (or ``--batch`` jobs per call). Default: medians of the EVALSHA µs per
job (INFO commandstats) and of Redis's main-thread CPU per job (INFO cpu), cuts run
alternately, run by run. ``--callgrind``: redis-server under valgrind's callgrind,
counters zeroed after a warm-up, instructions per job (deterministic: not disturbed by
other load on the box; valgrind must be installed). A cut script is not a correct one:
these copies only say what a piece costs, they are never shipped.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pathlib
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from scheduler.embedded import EmbeddedRedis  # noqa: E402
from scheduler.model import After, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis import RedisStore  # noqa: E402
from scheduler.stores.redis.protocol import definitions, gateway  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402

TOP = "do return 1 end\n"  # a cut in the script's body
IN_PUT = "  do return 'x', 1, false end\n"  # a cut inside put (include/put.lua)
# name -> (the line the cut follows, what is inserted); in the order the script runs
CUTS: list[tuple[str, str, str]] = [
    ("empty script", "#!lua\n", "do return 1 end\n"),
    ("units defined", "--@include put\n", TOP),
    ("arguments checked", "  if not seen[a.lane] then seen[a.lane] = true; lanes[#lanes + 1] = a.lane end\nend\n", TOP),
    ("namespace keys checked", "if corrupt then return corrupt end\n", TOP),
    ("put: old job read", "  local old, bad, aside = read_old(job)\n", IN_PUT),
    ("put: old lists deleted", "  redis.call('DEL', jk, P .. 'skips:' .. job, P .. 'dead:' .. job, P .. 'bf:' .. job, P .. 'runs:' .. job)\n", IN_PUT),
    ("put: seq and gen taken", "  local seq, gen = c.ids()\n", IN_PUT),
    ("put: hash written", "  write_hash(a, jk, old, c.lanes, seq, gen, now, due, k, anchor)\n", IN_PUT),
    ("put: due member added", "  due_add(a.lane, a.due_s, member)\n", IN_PUT),
    ("put: wake-up", "  wake_new(heads, a.lane, member, due)\n", IN_PUT),
    ("the whole script", "", ""),
]  # fmt: skip


def whole(tree: str, name: str = "add") -> str:
    """The assembled lua/``name``.lua of the checkout at ``tree``."""
    code = (  # the loader's module: protocol/scripts.py, or stores/redis/scripts.py before
        "import importlib.util as u; m = 'scheduler.stores.redis.protocol.scripts'; "
        "s = __import__(m if u.find_spec('scheduler.stores.redis.protocol') else "
        f"'scheduler.stores.redis.scripts', fromlist=['source']); print(s.source('{name}'), end='')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env={**os.environ, "PYTHONPATH": tree},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def texts() -> dict[str, str]:
    base = lua.source("add").replace("--@include put\n", "")
    units_end = base.index("\nlocal m = #ARGV - 2\n") + 1
    out = {}
    for name, after, insert in CUTS:
        if name == "units defined":
            out[name] = base[:units_end] + TOP + base[units_end:]
            continue
        if after and after not in base:
            raise SystemExit(f"the cut {name!r} no longer matches add.lua: {after!r}")
        out[name] = base.replace(after, after + insert, 1) if after else base
    return out


def jobs_args(store: RedisStore, n: int) -> list[list]:  # type: ignore[type-arg]
    return [
        definitions.add_args(
            JobSpec(f"j{uuid.uuid4().hex}", TaskRef("bench.hit", f'{{"i": {i}}}'), After(7200)),
            store.payload_limit,
            store.redis_now_ms,
        )
        for i in range(n)
    ]


LIBRARY = "after, as a library (FCALL)"  # --before: this checkout's add.lua as the gateway sends it


def sent(text: str) -> gateway.Lua:
    """What the calls send: ``text`` as a script (EVALSHA), or for LIBRARY this checkout's
    add.lua as the gateway sends it."""
    return lua.sendable("add") if text == LIBRARY else gateway.Lua(text)


def calls(
    client: redis.Redis, script: gateway.Lua, store: RedisStore, args: list, batch: int
) -> None:  # type: ignore[type-arg]
    for i in range(0, len(args), batch):
        argv = [store.keys.prefix, "", *[x for a in args[i : i + batch] for x in a]]
        gateway.call(client, script, [store.keys.epoch], argv)


def main_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"] + cpu["used_cpu_sys_main_thread"])


def timed(a: argparse.Namespace, scripts: dict[str, str]) -> dict[str, tuple[float, float]]:
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n in scripts}
    with EmbeddedRedis(appendonly=False) as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for _ in range(a.runs):
            for name, text in scripts.items():
                store = RedisStore(client, f"b{uuid.uuid4().hex[:8]}")
                script = sent(text)
                args = jobs_args(store, a.jobs + 500)
                calls(client, script, store, args[:500], a.batch)  # warm
                client.config_resetstat()
                cpu = main_cpu(client)
                calls(client, script, store, args[500:], a.batch)
                cpu = main_cpu(client) - cpu
                stats = client.info("commandstats")
                usec = sum(
                    float(stats.get(f"cmdstat_{c}", {}).get("usec", 0))
                    for c in ("evalsha", "fcall")
                )
                runs[name].append((usec / a.jobs, cpu * 1e6 / a.jobs))
                client.flushall()
    return {n: tuple(statistics.median(r[i] for r in v) for i in (0, 1)) for n, v in runs.items()}  # type: ignore[misc]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def callgrind_redis(out: str) -> Iterator[tuple[redis.Redis, Callable[[str], None]]]:  # type: ignore[type-arg]
    """A redis-server under callgrind (its dumps: ``out``.N), answering; yields a client
    and ``control(flag)``: ``"-z"`` zeroes the counters, ``"-d"`` dumps them. ``hz 1``:
    its timer work (serverCron, which runs more often the slower valgrind goes, i.e. the
    busier the box) stays out of the counts (±0.3k per job between runs, not ±1.5k).
    Without valgrind or redis-server on PATH: one line, exit 2 (every probe that counts
    instructions comes through here)."""
    for tool in ("valgrind", "redis-server"):
        if shutil.which(tool) is None:
            print(f"{tool} is not on PATH: instruction counts need callgrind on a redis-server "
                  "(apt-get install valgrind redis-server)", file=sys.stderr)  # fmt: skip
            sys.exit(2)
    port = free_port()
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
         "--port", str(port), "--save", "", "--appendonly", "no", "--hz", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def control(flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(server.pid)], capture_output=True)

    try:
        client = redis.Redis(port=port, decode_responses=True)
        for _ in range(300):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        yield client, control
        client.close()
    finally:
        server.terminate()
        server.wait()


def instructions(a: argparse.Namespace, text: str, out_dir: str) -> float:
    out = os.path.join(out_dir, f"cg.{uuid.uuid4().hex[:8]}")
    with callgrind_redis(out) as (client, control):
        store = RedisStore(client, "b1")
        script = sent(text)
        args = jobs_args(store, a.jobs + 300)
        calls(client, script, store, args[:300], a.batch)
        control("-z")
        calls(client, script, store, args[300:], a.batch)
        control("-d")
    dumped = [f for f in glob.glob(out + "*") if f.endswith(".1")]
    m = re.search(r"^summary: (\d+)", pathlib.Path(dumped[0]).read_text(), re.M)
    assert m, "no callgrind summary"
    return int(m.group(1)) / a.jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--before", metavar="DIR")
    a = ap.parse_args()
    scripts = texts()
    if a.before:
        scripts = {
            "before (whole script)": whole(a.before),
            "after (whole script)": whole("."),
            LIBRARY: LIBRARY,
        }
    prev = 0.0
    if a.callgrind:
        a.jobs = min(a.jobs, 1000)
        print(
            f"Redis instructions per job (callgrind, {a.jobs} jobs, batch {a.batch}); Δ: the piece"
        )
        with tempfile.TemporaryDirectory() as d:
            for name, text in scripts.items():
                n = instructions(a, text, d)
                print(f"{name:28} {n:9,.0f}  Δ {n - prev:+9,.0f}", flush=True)
                prev = n if not a.before or not prev else prev  # --before: against before
        return
    med = timed(a, scripts)
    print(f"µs per job (medians of {a.runs}, batch {a.batch}): EVALSHA (Δ), Redis main-thread CPU")
    for name, (usec, cpu) in med.items():
        print(f"{name:28} {usec:6.1f} ({usec - prev:+5.1f})  {cpu:6.1f}")
        prev = usec


if __name__ == "__main__":
    main()
