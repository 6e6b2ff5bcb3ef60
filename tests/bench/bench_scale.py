#!/usr/bin/env python3
"""Cost curves: what one operation costs, and what one pending job weighs, as the number
of pending jobs n grows 10^3 -> 10^6 -- in-process (MemoryStore) and in Redis -- and how
much memory a shared-mode replica keeps while n grows.

Not part of the test run; see tests/bench/README.md ("Cost curves"). Typical use:

    /work/benchvenv-scale/bin/pip install matplotlib 'redis[hiredis]' click
    PYTHONPATH=$PWD /work/benchvenv-scale/bin/python tests/bench/bench_scale.py --runs 3

At each size n (reached by bulk loading, untimed), K sampled operations are timed one by
one and their median is reported (the mean server time for Redis, see below):

* schedule -- ``Client.enqueue`` of a one-off job due in 1-2 h (random due time);
* cancel   -- ``Client.cancel`` of those K jobs (so n is unchanged afterwards);
* claim    -- ``store.claim_due({"default": 1}, ...)``: the call a dispatcher makes, one job
              per call, on K jobs due now (added untimed; they are the head of the queue);
* complete -- ``store.complete(claim, None)`` of each of those claims.

In-process: a fresh interpreter per run, ``Client(MemoryStore(FakeClock()))``, so only the
store's work is timed. Memory per job = (RSS after loading n - RSS before) / n.

Redis: a private redis-server per run (free port, own dir, AOF off -- persistence does
not change memory or script cost, and 10^6 fsyncs would only slow the setup), with the
listpack/encoding settings of deploy/redis.conf. Two figures per operation: the client's
median round trip (redis-py + hiredis over loopback, the Lua script included) and Redis's
own time per call (the median of the K EVALSHA durations in SLOWLOG, which records
every script call while the operations are timed; the mean from ``INFO commandstats`` is
kept in the JSON as ``<op>_redis_mean``). Memory per job = (used_memory after loading n -
used_memory before) / n, measured before the sampled operations; the event stream (capped
at ~10,000 entries) is filled before the baseline, so it is not counted per job.

Replica: one ``python -m scheduler run`` process against the same Redis serves the lane
the n jobs are in (they are due in 1-2 h, so it never claims them). Its RSS is read after
loading each size and again after it has run ``--replica-jobs`` due-now jobs; it had run
12,000 jobs before the first size, so its bounded spec cache (10,000 definitions) is
already full and any further growth would come from n. It is stopped (SIGSTOP) while the
operations are timed, so it cannot claim the sampled jobs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for _p in (ROOT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from scheduler.client import Client  # noqa: E402

NS = "scale"
TASK = "bench.noop"
OPS = ("schedule", "cancel", "claim", "complete")
SIZES = (1_000, 10_000, 100_000, 1_000_000)
PLOTS = os.path.join(HERE, "plots")
SLOWLOG_LEN = 20_000
perf_ns = time.perf_counter_ns


def kwargs_for(i: int) -> dict:
    """The job arguments every benchmark job carries (as bench_shared.py's memory row:
    a 13-digit number and a short tag, so a definition is ~90 bytes of JSON)."""
    return {"due_ms": 1_764_000_000_000 + i, "tag": "M"}


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def med_us(samples_ns: list[int]) -> float:
    return statistics.median(samples_ns) / 1000


def samples_at(n: int, k: int) -> int:
    """Sampled operations at size n: K, but at most n/2 (so sampling moves n little)."""
    return max(50, min(k, n // 2))


# ------------------------------------------------------------------------ in-process
def inprocess_run(sizes: list[int], k: int, seed: int) -> dict:
    """One run in this (fresh) interpreter; returns {n: {op: us, rss_per_job: B, ...}}."""
    from scheduler.stores.memory import MemoryStore
    from scheduler.testing import FakeClock

    rng = random.Random(seed)
    store = MemoryStore(FakeClock())
    client = Client(store)
    client.enqueue(TASK, delay=3600, job_id="warm", kwargs=kwargs_for(0))
    gc.collect()
    base, have, out = rss_bytes(), 0, {}
    for n in sizes:
        while have < n:
            m = min(10_000, n - have)
            client.enqueue_many(
                {
                    "task": TASK,
                    "delay": 3600 + 3600 * rng.random(),
                    "job_id": f"j{have + i}",
                    "kwargs": kwargs_for(have + i),
                }
                for i in range(m)
            )
            have += m
        gc.collect()
        res = {"rss_per_job": (rss_bytes() - base) / n, "rss_mb": rss_bytes() / 2**20}
        kk = samples_at(n, k)
        times: dict[str, list[int]] = {op: [] for op in OPS}
        ids = [f"s{n}-{i}" for i in range(kk)]
        for i, jid in enumerate(ids):
            d, kw = 3600 + 3600 * rng.random(), kwargs_for(i)
            t = perf_ns()
            client.enqueue(TASK, delay=d, job_id=jid, kwargs=kw)
            times["schedule"].append(perf_ns() - t)
        rng.shuffle(ids)
        for jid in ids:
            t = perf_ns()
            client.cancel(jid)
            times["cancel"].append(perf_ns() - t)
        client.enqueue_many(
            {"task": TASK, "delay": 0, "job_id": f"c{n}-{i}", "kwargs": kwargs_for(i)}
            for i in range(kk)
        )
        claims = []
        for _ in range(kk):
            t = perf_ns()
            batch = store.claim_due({"default": 1}, None, "bench")
            times["claim"].append(perf_ns() - t)
            claims.extend(batch.claims)
        assert len(claims) == kk, f"claimed {len(claims)} of {kk} due jobs"
        for c in claims:
            t = perf_ns()
            store.complete(c, None)
            times["complete"].append(perf_ns() - t)
        res.update({op: med_us(v) for op, v in times.items()})
        res["samples"] = kk
        out[n] = res
        print(f"  in-process n={n:,}: " + fmt_res(res), file=sys.stderr, flush=True)
    return out


def inprocess_child(sizes: list[int], k: int, seed: int) -> dict:
    """Run ``inprocess_run`` in a fresh interpreter (clean RSS baseline)."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child-inprocess",
        "--samples",
        str(k),
        "--seed",
        str(seed),
        "--sizes",
        *map(str, sizes),
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"in-process child exited with status {proc.returncode}")
    return {int(n): v for n, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


# ----------------------------------------------------------------------------- Redis
def listpack_settings() -> list[tuple[str, str]]:
    """The encoding settings of deploy/redis.conf (the ones the memory figure depends on)."""
    out = []
    with open(os.path.join(ROOT, "deploy", "redis.conf")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[0].endswith(
                (
                    "-listpack-entries",
                    "-listpack-value",
                    "-listpack-size",
                    "-max-bytes",
                    "-max-entries",
                )
            ):
                out.append((parts[0], parts[1]))
    return out


def script_usec(r) -> tuple[int, int]:
    """(calls, usec) of EVALSHA + EVAL since the last CONFIG RESETSTAT."""
    calls = usec = 0
    for name, v in r.info("commandstats").items():
        if name in ("cmdstat_evalsha", "cmdstat_eval"):
            calls += v["calls"]
            usec += v["usec"]
    return calls, usec


def wait_for(pred, timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(poll)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


class Replica:
    """One ``python -m scheduler run`` process (4 workers, lease 30 s, resync 5 s)."""

    def __init__(self, url: str, logdir: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([HERE, ROOT, env.get("PYTHONPATH", "")])
        self.log = os.path.join(logdir, "replica.log")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "scheduler",
                    "run",
                    "--redis",
                    url,
                    "--namespace",
                    NS,
                    "--import",
                    "shared_tasks",
                    "--workers",
                    "4",
                    "--lease",
                    "30",
                    "--resync",
                    "5",
                    "--log-level",
                    "WARNING",
                ],
                env=env,
                cwd=HERE,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def rss(self) -> int:
        return rss_bytes(self.proc.pid)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def redis_run(sizes: list[int], k: int, replica_jobs: int, seed: int) -> tuple[dict, dict]:
    """One run against a fresh private redis-server; returns ({n: figures}, info)."""
    import tempfile

    import redis

    from scheduler.embedded import EmbeddedRedis
    from scheduler.stores.redis import RedisStore

    rng = random.Random(seed)
    extra = [a for key, v in listpack_settings() for a in (f"--{key}", v)]
    server = EmbeddedRedis(appendonly=False, extra_args=extra).start()
    logdir = tempfile.mkdtemp(prefix="bench-scale-")
    replica = None
    try:
        r = redis.Redis.from_url(server.url, decode_responses=True)
        store = RedisStore(server.url, NS, lease=30)
        store.check_server()
        client = Client(store)
        keys = store.keys
        done = lambda: int(r.hget(keys.stats, "succeeded") or 0)  # noqa: E731

        def run_due(count: int, tag: str) -> None:
            """``count`` jobs due now, run by the replica; then their retired keys go."""
            goal = done() + count
            ids = [f"{tag}-{i}" for i in range(count)]
            for i in range(0, count, 5000):
                client.enqueue_many(
                    {"task": TASK, "delay": 0, "job_id": j, "kwargs": kwargs_for(i + x)}
                    for x, j in enumerate(ids[i : i + 5000])
                )
            wait_for(lambda: done() >= goal, 300, f"the replica to run {count} jobs", 0.1)
            drop(ids)

        def drop(ids: list[str]) -> None:
            with r.pipeline(transaction=False) as p:
                for j in ids:
                    p.delete(keys.job(j))
                p.execute()

        # warm up: scripts loaded, every structure created, the event stream at its cap
        client.enqueue(TASK, delay=86_400, job_id="warm", kwargs=kwargs_for(0))
        warm = [f"w-{i}" for i in range(6000)]
        client.enqueue_many({"task": TASK, "delay": 86_400, "job_id": j} for j in warm)
        for j in warm:
            client.cancel(j)
        drop(warm)
        replica = Replica(server.url, logdir)
        wait_for(lambda: bool(r.keys(keys.replica("*"))), 60, "the replica's key")
        run_due(12_000, "pre")  # fills the replica's spec cache (10,000) before n grows
        time.sleep(0.5)
        info = {
            "settings": dict(listpack_settings()),
            "redis_version": r.info("server")["redis_version"],
            "replica_rss_idle_mb": replica.rss() / 2**20,
        }
        m0 = r.info("memory")["used_memory"]
        have, out = 0, {}
        for n in sizes:
            now = time.time()
            while have < n:
                m = min(5000, n - have)
                client.enqueue_many(
                    {
                        "task": TASK,
                        "at": now + 3600 + 3600 * rng.random(),
                        "job_id": f"j{have + i}",
                        "kwargs": kwargs_for(have + i),
                    }
                    for i in range(m)
                )
                have += m
            time.sleep(0.3)
            mem = r.info("memory")
            res = {
                "mem_per_job": (mem["used_memory"] - m0) / n,
                "used_memory_mb": mem["used_memory"] / 2**20,
                "replica_rss_loaded_mb": replica.rss() / 2**20,
            }
            run_due(replica_jobs, f"r{n}")
            time.sleep(0.3)
            res["replica_rss_mb"] = replica.rss() / 2**20
            replica.pause()
            try:
                res.update(redis_ops(n, k, client, store, r, rng))
            finally:
                replica.resume()
            if n == sizes[-1]:
                info["breakdown"] = breakdown(r, keys, n)
            out[n] = res
            print(f"  redis n={n:,}: " + fmt_res(res), file=sys.stderr, flush=True)
        return out, info
    finally:
        if replica is not None:
            replica.stop()
        server.stop()


def redis_ops(n: int, k: int, client: Client, store, r, rng: random.Random) -> dict:
    """Time K of each operation at size n (client round trip median, Redis usec/call)."""
    kk = samples_at(n, k)
    res: dict = {"samples": kk}
    times: dict[str, list[int]] = {op: [] for op in OPS}

    def server(op: str) -> None:
        calls, usec = script_usec(r)
        res[f"{op}_redis_mean"] = usec / max(1, calls)
        durations = [
            e["duration"]
            for e in r.slowlog_get(SLOWLOG_LEN)
            if _text(e["command"]).upper().startswith("EVALSHA")
        ]
        res[f"{op}_redis"] = statistics.median(durations) if durations else float("nan")
        res[f"{op}_logged"] = len(durations)  # == samples, unless a call took <= 10 us

    def reset() -> None:
        r.config_resetstat()
        r.slowlog_reset()

    ids = [f"s{n}-{i}" for i in range(kk)]
    now = time.time()
    # SLOWLOG keeps each script call's own duration (for medians: a mean is hurt by the
    # rare call that was preempted on a shared box); the 10 us threshold leaves out the
    # commands run inside the scripts (a few us each) but no script call (>= ~30 us)
    r.config_set("slowlog-max-len", str(SLOWLOG_LEN))
    r.config_set("slowlog-log-slower-than", "10")
    reset()
    for i, jid in enumerate(ids):
        at, kw = now + 3600 + 3600 * rng.random(), kwargs_for(i)
        t = perf_ns()
        client.enqueue(TASK, at=at, job_id=jid, kwargs=kw)
        times["schedule"].append(perf_ns() - t)
    server("schedule")
    rng.shuffle(ids)
    reset()
    for jid in ids:
        t = perf_ns()
        client.cancel(jid)
        times["cancel"].append(perf_ns() - t)
    server("cancel")
    due = [f"c{n}-{i}" for i in range(kk)]
    client.enqueue_many(
        {"task": TASK, "at": now - 1, "job_id": j, "kwargs": kwargs_for(i)}
        for i, j in enumerate(due)
    )
    claims = []
    reset()
    for _ in range(kk):
        t = perf_ns()
        batch = store.claim_due({"default": 1}, 30.0, "bench-sampler")
        times["claim"].append(perf_ns() - t)
        claims.extend(batch.claims)
    server("claim")
    assert len(claims) == kk, f"claimed {len(claims)} of {kk} due jobs"
    reset()
    for c in claims:
        t = perf_ns()
        store.complete(c, None)
        times["complete"].append(perf_ns() - t)
    server("complete")
    r.config_set("slowlog-log-slower-than", "10000")
    with r.pipeline(transaction=False) as p:  # retired jobs stay a day: not part of n
        for j in ids + due:
            p.delete(store.keys.job(j))
        p.execute()
    res.update({op: med_us(v) for op, v in times.items()})
    return res


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def breakdown(r, keys, n: int) -> dict:
    """Where the bytes of a pending job go, at the largest size."""
    zset = keys.due("default")
    sample = r.hgetall(keys.job("j1"))
    return {
        "due zset B/job": r.memory_usage(zset, samples=0) / n,
        "due zset encoding": r.object("encoding", zset),
        "job hash B": r.memory_usage(keys.job("j1"), samples=0),
        "job hash encoding": r.object("encoding", keys.job("j1")),
        "job hash fields": len(sample),
        "definition B": len(sample.get("def", "")),
        "events stream MB (constant)": r.memory_usage(keys.events, samples=0) / 2**20,
    }


# --------------------------------------------------------------------------- report
def fmt_res(res: dict) -> str:
    return "  ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items())


def medians(runs: list[dict]) -> dict:
    out: dict = {}
    for n in runs[0]:
        out[n] = {}
        for key in runs[0][n]:
            vals = [run[n][key] for run in runs if n in run and key in run[n]]
            out[n][key] = statistics.median(vals)
            if len(vals) > 1:
                out[n][key + "_range"] = (min(vals), max(vals))
    return out


def ratios(med: dict, key: str) -> list[str]:
    sizes = sorted(med)
    cells = ["–"]
    for a, b in zip(sizes, sizes[1:]):
        cells.append(f"×{med[b][key] / med[a][key]:.2f}" if med[a][key] else "?")
    return cells


def table(title: str, med: dict, cols: list[tuple[str, str, str]]) -> str:
    """A markdown table: one row per size, each column value (and its per-decade ratio
    where the column is a cost)."""
    head = "| pending n | " + " | ".join(label for _, label, _ in cols) + " |"
    lines = [f"**{title}**", "", head, "|---:|" + "---:|" * len(cols)]
    rat = {key: ratios(med, key) for key, _, f in cols if f.endswith("r")}
    for i, n in enumerate(sorted(med)):
        cells = []
        for key, _, f in cols:
            v = med[n].get(key)
            cell = "n/a" if v is None else format(v, f.rstrip("r"))
            if key in rat and i:
                cell += f" ({rat[key][i]})"
            cells.append(cell)
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(inproc: dict | None, red: dict | None, outdir: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib not installed: no plots (pip install matplotlib in the bench venv)",
            file=sys.stderr,
        )
        return []
    os.makedirs(outdir, exist_ok=True)
    paths = []
    panels = [
        (m, t, suffix)
        for m, t, suffix in (
            (inproc, "in-process (MemoryStore): the call", ""),
            (red, "Redis: the script's time inside Redis", "_redis"),
            (red, "Redis: the client's round trip (loopback)", ""),
        )
        if m
    ]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.5), squeeze=False)
        for ax, (m, title, suffix) in zip(axes[0], panels):
            ns = sorted(m)
            for op, color in zip(OPS, ("C0", "C1", "C2", "C3")):
                ax.plot(ns, [m[n][op + suffix] for n in ns], "o-", color=color, label=op)
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.set_xlabel("pending jobs n")
            ax.set_ylabel("µs per operation (median)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(
            "duetime: cost per operation vs pending jobs (O(log n) = straight line on log x)",
            fontsize=10,
        )
        fig.tight_layout()
        paths.append(os.path.join(outdir, "scale_costs.png"))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    if inproc or red:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.5))
        for m, key, label in (
            (red, "mem_per_job", "Redis used_memory / n"),
            (inproc, "rss_per_job", "in-process RSS / n"),
        ):
            if m:
                ns = sorted(m)
                a1.plot(ns, [m[n][key] for n in ns], "o-", label=label)
        a1.axhline(450, color="grey", ls=":", label="target 450 B (Redis)")
        a1.set_xscale("log")
        a1.set_ylim(bottom=0)
        a1.set_xlabel("pending jobs n")
        a1.set_ylabel("bytes per pending job")
        a1.set_title("memory per pending job", fontsize=10)
        a1.grid(True, alpha=0.3)
        a1.legend(fontsize=8)
        if red:
            ns = sorted(red)
            a2.plot(
                ns,
                [red[n]["replica_rss_loaded_mb"] for n in ns],
                "o-",
                label="replica RSS after loading n",
            )
            a2.plot(
                ns,
                [red[n]["replica_rss_mb"] for n in ns],
                "s-",
                label="replica RSS after running more jobs",
            )
            a2.plot(
                ns,
                [red[n]["used_memory_mb"] for n in ns],
                "^--",
                color="grey",
                label="Redis used_memory (for scale)",
            )
            a2.set_xscale("log")
            a2.set_yscale("log")
            a2.set_xlabel("pending jobs n")
            a2.set_ylabel("MB")
            a2.set_title(
                "a replica's own memory stays flat while Redis holds the jobs", fontsize=10
            )
            a2.grid(True, alpha=0.3)
            a2.legend(fontsize=8)
        fig.tight_layout()
        paths.append(os.path.join(outdir, "scale_memory.png"))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=1000, help="timed operations per kind and size")
    ap.add_argument(
        "--replica-jobs", type=int, default=2000, help="due jobs the replica runs at each size"
    )
    ap.add_argument(
        "--only", nargs="+", choices=("inprocess", "redis"), default=["inprocess", "redis"]
    )
    ap.add_argument("--plots", default=PLOTS, help="directory for the PNGs ('' = none)")
    ap.add_argument("--json", help="also write raw runs and medians here")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--child-inprocess", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    # SIGTERM / SIGINT (also when started in the background, where SIGINT is ignored)
    # unwind through the finally blocks, which stop every server and replica started here
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sizes = sorted(args.sizes)
    if args.child_inprocess:
        print(json.dumps(inprocess_run(sizes, args.samples, args.seed)))
        return
    raw: dict = {"inprocess": [], "redis": [], "redis_info": []}
    t0 = time.monotonic()
    for run in range(args.runs):
        if "inprocess" in args.only:
            print(f"run {run + 1}/{args.runs}: in-process", file=sys.stderr, flush=True)
            raw["inprocess"].append(inprocess_child(sizes, args.samples, args.seed + run))
        if "redis" in args.only:
            print(f"run {run + 1}/{args.runs}: redis", file=sys.stderr, flush=True)
            res, info = redis_run(sizes, args.samples, args.replica_jobs, args.seed + run)
            raw["redis"].append(res)
            raw["redis_info"].append(info)
    inproc = medians(raw["inprocess"]) if raw["inprocess"] else None
    red = medians(raw["redis"]) if raw["redis"] else None
    print(
        f"# bench_scale: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, medians of {args.runs} run(s), "
        f"{time.monotonic() - t0:.0f} s; samples per operation and size: "
        f"min({args.samples}, n/2)\n"
    )
    if inproc:
        print(
            table(
                "in-process (MemoryStore), µs per operation, median; (×r) = ratio to the "
                "previous decade",
                inproc,
                [
                    ("schedule", "schedule µs", ".1fr"),
                    ("cancel", "cancel µs", ".1fr"),
                    ("claim", "claim µs", ".1fr"),
                    ("complete", "complete µs", ".1fr"),
                    ("rss_per_job", "RSS B/job", ",.0f"),
                ],
            )
        )
        print()
    if red:
        info = raw["redis_info"][-1]
        print(
            table(
                "Redis: script time in Redis, µs per call (median of the K calls, from "
                "SLOWLOG; medians over runs); (×r) = ratio to the previous decade",
                red,
                [
                    ("schedule_redis", "schedule", ".1fr"),
                    ("cancel_redis", "cancel", ".1fr"),
                    ("claim_redis", "claim", ".1fr"),
                    ("complete_redis", "complete", ".1fr"),
                    ("mem_per_job", "Redis B/job", ",.0f"),
                    ("replica_rss_loaded_mb", "replica RSS MB", ".1f"),
                    ("replica_rss_mb", "after running jobs", ".1f"),
                ],
            )
        )
        print()
        print(
            table(
                "Redis: client round trip, µs per call (median)",
                red,
                [
                    ("schedule", "schedule", ".0fr"),
                    ("cancel", "cancel", ".0fr"),
                    ("claim", "claim", ".0fr"),
                    ("complete", "complete", ".0fr"),
                ],
            )
        )
        print(
            f"\nRedis {info['redis_version']}, AOF off; encoding settings (deploy/redis.conf): "
            + ", ".join(f"{k} {v}" for k, v in info["settings"].items())
        )
        print(f"replica RSS when idle before the first size: {info['replica_rss_idle_mb']:.1f} MB")
        print(
            "at the largest size: "
            + ", ".join(
                f"{k} = {v:.1f}" if isinstance(v, float) else f"{k} = {v}"
                for k, v in info.get("breakdown", {}).items()
            )
        )
    if args.plots:
        for p in plot(inproc, red, args.plots):
            print(f"plot: {os.path.relpath(p, ROOT)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"raw": raw, "inprocess": inproc, "redis": red, "args": vars(args)},
                f,
                indent=1,
                default=str,
            )


if __name__ == "__main__":
    main()
