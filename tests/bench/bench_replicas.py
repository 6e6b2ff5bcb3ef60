#!/usr/bin/env python3
"""Throughput with many replicas: 1, 3 and 6 ``duetime run`` processes against one Redis
and against a local Redis Cluster.

Not part of the test run; see tests/bench/README.md ("Many replicas"). It needs duetime's
own dependencies (redis-py, click) and a redis-server binary; the cluster setup also
redis-cli and pytest (it is tests/cluster_fixtures.py's LocalCluster). It starts every
server and process it uses (never port 6379). Typical use, from a checkout:

    PYTHONPATH=$PWD .venv/bin/python tests/bench/bench_replicas.py --runs 3

Per setup, replica count R and run, a fresh Redis under test -- ``redis``: one private
redis-server, the namespace unsharded; ``cluster``: a LocalCluster of 3 masters, the
namespace in ``--shards`` shards (16), the replicas given ``redis+cluster://...?shards=16``
-- (AOF off by default, encoding settings of deploy/redis.conf) and R replicas
``python -m scheduler run --import shared_tasks --workers 4 --lease 30 --resync 5``.
The task (``bench.hit`` of shared_tasks.py) appends its start time to a separate
*witness* redis-server, so that traffic is not counted against the Redis under test.

* burst -- N no-op jobs (default 20,000) with one common due time, enqueued beforehand
  with ``Client.enqueue_many`` (pipelined). Started jobs/s = N / (last start - due);
  end to end = N / (the moment the namespace's ``succeeded`` counter reaches N - due),
  polled every 50 ms.
* lag -- 2,000 jobs with due times uniform over 5 s (fixed seed); lag = start - due
  (p50 / p99 / max, ms; the producer's and the replicas' clocks are the same machine's).

CPU per job, for both scenarios, from just before the first due time until the last job
finished: Redis ``INFO cpu`` (used_cpu_sys + used_cpu_user, summed over the cluster's
nodes), the replicas' and the
witness's utime + stime (/proc), divided by the jobs; "cores" = CPU seconds / wall
seconds, which names the bottleneck on this 2-core box. "Waiting for a CPU" = the time
their threads were runnable but not running (/proc/PID/task/*/schedstat) per wall
second: high means the box's CPUs (other processes included: the box is shared) set the
pace, not Redis or duetime's design. EVALSHA calls per job come from
``INFO commandstats``. With ``--breakdown`` (default on) one extra burst per R runs with
Redis's SLOWLOG recording every call, to split Redis time by script; that burst is not
part of the other figures (the slowlog costs Redis time of its own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for _p in (ROOT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import redis  # noqa: E402
import shared_tasks  # noqa: E402
from _common import script_calls  # noqa: E402

from scheduler.client import Client  # noqa: E402
from scheduler.embedded import HOST, EmbeddedRedis  # noqa: E402
from scheduler.stores.redis.protocol import scripts as lua  # noqa: E402
from scheduler.stores.redis.protocol import urls  # noqa: E402
from scheduler.stores.redis.protocol.keys import Keys  # noqa: E402

NS = "bench"
WORKERS = 4
TICK = os.sysconf("SC_CLK_TCK")
now_ms = lambda: time.time() * 1000  # noqa: E731


def listpack_args() -> list[str]:
    """The encoding settings of deploy/redis.conf as redis-server arguments."""
    out = []
    with open(os.path.join(ROOT, "deploy", "redis.conf")) as f:
        for line in f:
            p = line.split()
            if len(p) == 2 and ("-listpack-" in p[0] or p[0].startswith("stream-node-")):
                out += [f"--{p[0]}", p[1]]
    return out


def proc_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_wait(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass  # a thread that just ended
    except OSError:
        pass
    return total / 1e9


def pct(vals: list[float], p: float) -> float:
    return vals[min(len(vals) - 1, max(0, round(p / 100 * len(vals) + 0.5) - 1))]


class Setup:
    """A fresh Redis under test (one server, or with ``shards`` > 0 a fresh 3-master
    LocalCluster whose namespace has that many shards) and R replicas; the shared witness
    server is given."""

    def __init__(
        self, replicas: int, witness: EmbeddedRedis, aof: str, logdir: str, shards: int = 0
    ) -> None:
        self.procs: list[subprocess.Popen] = []
        self.client: Client | None = None
        self.servers: list = []  # what stop() must stop: an EmbeddedRedis or a LocalCluster
        try:
            self._start(replicas, witness, aof, logdir, shards)
        except BaseException:
            self.stop()  # nothing started here outlives a failed or interrupted start
            raise

    def _redis(self, aof: str, shards: int) -> str:
        """Start the Redis under test; fills self.nodes / self.node_pids; returns the URL."""
        if shards:
            from tests.cluster_fixtures import LocalCluster  # needs pytest and redis-cli

            cluster = LocalCluster()
            self.servers.append(cluster)
            nodes = cluster.nodes
            url = f"{cluster.url}/?shards={shards}"
        else:
            server = EmbeddedRedis(
                appendonly=aof != "off",
                appendfsync="everysec" if aof == "off" else aof,
                extra_args=listpack_args(),
            ).start()
            self.servers.append(server)
            nodes, url = [server], server.url
        self.nodes = [redis.Redis(host=HOST, port=n.port, decode_responses=True) for n in nodes]
        self.node_pids = [n.pid or 0 for n in nodes]
        if shards:  # LocalCluster takes no server arguments: the same settings, set live
            a = listpack_args()
            for node in self.nodes:
                for k, v in zip(a[::2], a[1::2]):
                    node.config_set(k[2:], v)
                if aof != "off":
                    node.config_set("appendfsync", aof)
                    node.config_set("appendonly", "yes")
        return url

    def _start(
        self, replicas: int, witness: EmbeddedRedis, aof: str, logdir: str, shards: int
    ) -> None:
        url = self._redis(aof, shards)
        self.r = urls.connect(url, decode_responses=True)  # routes by slot on a cluster
        self.w = redis.Redis.from_url(witness.url, decode_responses=True)
        self.witness_pid = witness.pid
        self.w.delete(shared_tasks.HITS)
        self.client = Client(url, namespace=NS)
        n = max(1, shards)
        self.stats_keys = [Keys(NS, i, n).stats for i in range(n)]
        env = dict(
            os.environ,
            BENCH_WITNESS_URL=witness.url,
            PYTHONPATH=os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]),
        )
        argv = [
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
            str(WORKERS),
            "--lease",
            "30",
            "--resync",
            "5",
            "--log-level",
            "WARNING",
        ]
        for i in range(replicas):
            with open(os.path.join(logdir, f"replica-{replicas}-{i}.log"), "ab") as out:
                self.procs.append(
                    subprocess.Popen(
                        argv,
                        env=env,
                        cwd=HERE,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        # a replica's key is written by its claims, per shard: count distinct owners
        pattern = f"duetime:{{{NS}*:replica:*"

        def live() -> int:
            return len(
                {k.rsplit(":replica:", 1)[1] for node in self.nodes for k in node.keys(pattern)}
            )

        self.wait(lambda: live() >= replicas, 60, f"{replicas} replicas")

    def wait(self, pred, timeout: float, what: str, poll: float = 0.05) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            dead = [p.pid for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"replica(s) {dead} exited while waiting for {what}")
            time.sleep(poll)
        return False

    def succeeded(self) -> int:
        return sum(int(self.r.hget(k, "succeeded") or 0) for k in self.stats_keys)

    def cpu(self) -> dict:
        """CPU counters now; Redis figures are summed over the nodes (one unless a cluster)."""
        redis_cpu = calls = 0.0
        for node in self.nodes:
            info = node.info("cpu")
            redis_cpu += info["used_cpu_sys"] + info["used_cpu_user"]
            calls += script_calls(node.info("commandstats"))
        return {
            "t": time.monotonic(),
            "redis": redis_cpu,
            "replicas": sum(proc_cpu(p.pid) for p in self.procs),
            "witness": proc_cpu(self.witness_pid),
            "evalsha": calls,
            "redis_wait": sum(proc_wait(pid) for pid in self.node_pids),
            "replicas_wait": sum(proc_wait(p.pid) for p in self.procs),
            "load": os.getloadavg()[0],
        }

    def enqueue(self, items: list[tuple[float, str]]) -> float:
        """Enqueue (due_ms, tag) jobs, pipelined in chunks; returns seconds taken."""
        t = time.perf_counter()
        for i in range(0, len(items), 2000):
            self.client.enqueue_many(
                {"task": "bench.hit", "at": due / 1000, "kwargs": {"due_ms": int(due), "tag": tag}}
                for due, tag in items[i : i + 2000]
            )
        return time.perf_counter() - t

    def starts(self, prefix: str) -> dict[str, tuple[float, float]]:
        first: dict[str, tuple[float, float]] = {}
        self.dups = 0
        for line in self.w.lrange(shared_tasks.HITS, 0, -1):
            tag, due, start, _pid, _sched = line.split("|")
            if tag.startswith(prefix):
                if tag in first:
                    self.dups += 1
                mine = (float(start), float(due))
                first[tag] = min(first.get(tag, mine), mine)
        return first

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(40)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        if self.client is not None:
            self.client.close()
        for server in self.servers:
            server.stop() if isinstance(server, EmbeddedRedis) else server.close()


def per_job(c0: dict, c1: dict, jobs: int, prefix: str) -> dict:
    wall = c1["t"] - c0["t"]
    out = {f"{prefix}_evalsha_per_job": (c1["evalsha"] - c0["evalsha"]) / jobs}
    for k in ("redis", "replicas", "witness"):
        d = c1[k] - c0[k]
        out[f"{prefix}_{k}_us_job"] = d / jobs * 1e6
        out[f"{prefix}_{k}_cores"] = d / wall
    for k in ("redis", "replicas"):  # runnable but not running: the box's CPUs were busy
        out[f"{prefix}_{k}_waitcpu"] = (c1[f"{k}_wait"] - c0[f"{k}_wait"]) / wall
    out[f"{prefix}_loadavg"] = c1["load"]
    return out


def calibrate(s: Setup) -> float:
    """Seconds per enqueued job (pipelined), on 500 jobs due in two hours."""
    base = now_ms() + 7_200_000
    return s.enqueue([(base + i, "cal") for i in range(500)]) / 500


def burst(s: Setup, n: int, timeout: float, before_due=None) -> dict:
    lead = max(3.0, 1.0 + 1.5 * n * calibrate(s))
    due = round(now_ms() + lead * 1000)
    done0 = s.succeeded()
    enq = s.enqueue([(due, f"B{i}") for i in range(n)])
    late = now_ms() > due
    time.sleep(max(0.0, (due - now_ms()) / 1000 - 0.2))
    if before_due is not None:
        before_due()
    c0 = s.cpu()
    finished = s.wait(lambda: s.succeeded() >= done0 + n, timeout, "the burst")
    t_done = now_ms()
    c1 = s.cpu()
    first = s.starts("B")
    res = {
        "burst_enqueue_s": enq,
        "burst_late": late,
        "burst_missing": n - len(first),
        "burst_dups": s.dups,
        "burst_partial": not finished,
    }
    if first:
        last = max(st for st, _ in first.values())
        res["burst_started_jobs_s"] = len(first) / max(1e-3, (last - due) / 1000)
    if finished:
        res["burst_done_jobs_s"] = n / max(1e-3, (t_done - due) / 1000)
    res.update(per_job(c0, c1, n, "burst"))
    return res


def lag(s: Setup, n: int, spread: float, timeout: float) -> dict:
    rng = random.Random(1234)
    delays = [rng.uniform(0, spread) for _ in range(n)]
    offset = max(2.0, 1.0 + 1.5 * n * calibrate(s))
    t0 = now_ms() + offset * 1000
    items = [(round(t0 + d * 1000), f"L{i}") for i, d in enumerate(delays)]
    done0 = s.succeeded()
    s.enqueue(items)
    late = now_ms() > min(d for d, _ in items)
    time.sleep(max(0.0, (t0 - now_ms()) / 1000 - 0.2))
    c0 = s.cpu()
    s.wait(lambda: s.succeeded() >= done0 + n, spread + timeout, "the lag jobs")
    c1 = s.cpu()
    time.sleep(0.5)  # late duplicates
    first = s.starts("L")
    lags = sorted(st - d for st, d in first.values())
    res = {"lag_missing": n - len(first), "lag_dups": s.dups, "lag_late_enqueue": late}
    if lags:
        res.update(lag_p50=pct(lags, 50), lag_p99=pct(lags, 99), lag_max=lags[-1], lag_min=lags[0])
    res.update(per_job(c0, c1, n, "lag"))
    return res


def breakdown(s: Setup, n: int, timeout: float) -> dict:
    """Redis time per job by script, from SLOWLOG (every call recorded) while one burst
    runs (from just before its due time: the enqueue is not included)."""
    names = {hashlib.sha1(lua.source(name).encode()).hexdigest(): name for name in lua.SCRIPTS}
    names.update({lua.library(name)[0]: name for name in lua.SCRIPTS})  # sent as FCALL
    cap = 100 * n  # Redis 7 also logs the commands a script runs: ~30 per job
    for node in s.nodes:  # every node of a cluster: the figures are summed over them
        node.config_set("slowlog-max-len", str(cap))

    def record() -> None:  # from just before the due time: the enqueue is not counted
        for node in s.nodes:
            node.slowlog_reset()
            node.config_set("slowlog-log-slower-than", "0")

    try:
        burst(s, n, timeout, before_due=record)
    finally:
        for node in s.nodes:
            node.config_set("slowlog-log-slower-than", "10000")
    usec: dict[str, int] = {}
    calls: dict[str, int] = {}
    for node in s.nodes:
        entries = node.slowlog_get(cap)
        node.slowlog_reset()
        if len(entries) >= cap:
            print("  (slowlog full: the breakdown misses the oldest calls)", file=sys.stderr)
        for e in entries:
            cmd = e["command"]
            cmd = cmd.decode() if isinstance(cmd, bytes) else cmd
            parts = cmd.split(" ", 2)
            if parts[0].upper() not in ("EVALSHA", "FCALL") or len(parts) < 2:
                continue  # a command run inside a script (its time is in the script's)
            name = names.get(parts[1], "?")
            usec[name] = usec.get(name, 0) + e["duration"]
            calls[name] = calls.get(name, 0) + 1
    return {
        name: {
            "us_per_job": usec[name] / n,
            "calls_per_job": calls[name] / n,
            "us_per_call": usec[name] / calls[name],
        }
        for name in sorted(usec, key=lambda k: -usec[k])
        if usec[name] / n >= 0.5
    }


def med(runs: list[dict], key: str) -> float | None:
    vals = [
        r[key]
        for r in runs
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
    ]
    return statistics.median(vals) if vals else None


ROWS = [
    ("burst_done_jobs_s", "burst: jobs/s end to end (all {burst} done)", "{:,.0f}"),
    ("burst_started_jobs_s", "burst: jobs/s started", "{:,.0f}"),
    ("burst_redis_us_job", "burst: Redis CPU per job (µs)", "{:.0f}"),
    ("burst_redis_cores", "burst: Redis CPU (cores busy)", "{:.2f}"),
    ("burst_replicas_us_job", "burst: replicas' CPU per job (µs, all replicas)", "{:.0f}"),
    ("burst_replicas_cores", "burst: replicas' CPU (cores busy)", "{:.2f}"),
    ("burst_witness_cores", "burst: witness Redis CPU (cores busy)", "{:.2f}"),
    ("burst_redis_waitcpu", "burst: Redis waiting for a CPU (share of wall time)", "{:.2f}"),
    ("burst_replicas_waitcpu", "burst: replicas waiting for a CPU (thread-s per s)", "{:.2f}"),
    ("burst_loadavg", "burst: 1-min load average of the box at the end", "{:.1f}"),
    ("burst_evalsha_per_job", "burst: script calls per job", "{:.2f}"),
    ("burst_missing", "burst: not run / duplicates", None),
    ("lag_p50", "lag p50 (ms), {lag_n} jobs over {spread:g} s", "{:.1f}"),
    ("lag_p99", "lag p99 (ms)", "{:.1f}"),
    ("lag_max", "lag max (ms)", "{:.1f}"),
    ("lag_redis_us_job", "steady: Redis CPU per job (µs)", "{:.0f}"),
    ("lag_replicas_us_job", "steady: replicas' CPU per job (µs)", "{:.0f}"),
    ("lag_missing", "lag: not run / duplicates", None),
]


def label(col: tuple[str, int]) -> str:
    setup, r = col
    return f"{'cluster' if setup == 'cluster' else 'one Redis'}, {r} replica{'s' if r > 1 else ''}"


def report(results: dict, args: argparse.Namespace, brk: dict) -> str:
    cols = list(results)
    fmtargs = {"burst": f"{args.burst:,}", "lag_n": f"{args.lag_n:,}", "spread": args.spread}
    lines = ["| | " + " | ".join(label(c) for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    for key, text, f in ROWS:
        cells = []
        for col in cols:
            runs = results[col]
            if f is None:
                a, b = key, key.replace("missing", "dups")
                cells.append(f"{sum(r.get(a, 0) for r in runs)} / {sum(r.get(b, 0) for r in runs)}")
                continue
            m = med(runs, key)
            cell = "n/a" if m is None else f.format(m)
            vals = [r[key] for r in runs if key in r]
            if m is not None and len(vals) > 1 and key.endswith(("jobs_s", "p99")):
                cell += f" ({f.format(min(vals))}–{f.format(max(vals))})"
            cells.append(cell)
        lines.append(f"| {text.format(**fmtargs)} | " + " | ".join(cells) + " |")
    out = "\n".join(lines)
    if brk:
        out += (
            "\n\nRedis time per job by script (SLOWLOG over one extra burst of "
            f"{args.breakdown_n:,} jobs, summed over the nodes; µs per job = calls per "
            "job × µs per call):\n\n"
        )
        out += "| script | " + " | ".join(label(c) for c in brk) + " |\n"
        out += "|---|" + "---:|" * len(brk) + "\n"
        names = sorted(
            {n for b in brk.values() for n in b},
            key=lambda n: -max(b.get(n, {}).get("us_per_job", 0) for b in brk.values()),
        )
        for name in names:
            cells = []
            for col in brk:
                e = brk[col].get(name)
                cells.append(
                    "–"
                    if e is None
                    else f"{e['us_per_job']:.0f} ({e['calls_per_job']:.2f} × {e['us_per_call']:.0f})"
                )
            out += f"| {name} | " + " | ".join(cells) + " |\n"
        out += (
            "| total | "
            + " | ".join(f"{sum(e['us_per_job'] for e in brk[c].values()):.0f}" for c in brk)
            + " |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 3, 6])
    ap.add_argument(
        "--setups",
        nargs="+",
        choices=("redis", "cluster"),
        default=["redis", "cluster"],
        help="redis: one private redis-server, one shard; cluster: a fresh local "
        "3-master Redis Cluster per count and run, --shards shards",
    )
    ap.add_argument("--shards", type=int, default=16, help="shards of the namespace on the cluster")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--burst", type=int, default=20_000, help="jobs in the burst")
    ap.add_argument("--lag-n", type=int, default=2000, help="jobs in the steady-rate run")
    ap.add_argument("--spread", type=float, default=5.0, help="seconds the lag jobs span")
    ap.add_argument(
        "--aof",
        choices=("off", "everysec", "always"),
        default="off",
        help="persistence of the Redis under test (default off, as bench_shared.py)",
    )
    ap.add_argument(
        "--no-breakdown",
        dest="breakdown",
        action="store_false",
        help="skip the extra SLOWLOG burst that splits Redis time by script",
    )
    ap.add_argument("--breakdown-n", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=180.0, help="per scenario, seconds")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2,000-job burst, 400 lag jobs")
    ap.add_argument("--json", help="also write the raw figures here")
    args = ap.parse_args()
    # SIGTERM / SIGINT (also when started in the background, where SIGINT is ignored)
    # unwind through the finally blocks, which stop every server and replica started here
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.quick:
        args.burst, args.lag_n, args.spread, args.breakdown_n = 2000, 400, 2.0, 500
    logdir = tempfile.mkdtemp(prefix="bench-replicas-")
    witness = EmbeddedRedis(appendonly=False).start()
    cols = [(setup, rc) for setup in args.setups for rc in args.replicas]
    results: dict[tuple[str, int], list[dict]] = {c: [] for c in cols}
    brk: dict[tuple[str, int], dict] = {}
    t0 = time.monotonic()
    try:
        for run in range(args.runs):
            for setup, rc in cols:
                print(
                    f"run {run + 1}/{args.runs}: {setup}, {rc} replica(s), load "
                    f"{os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
                s = Setup(
                    rc, witness, args.aof, logdir, shards=args.shards if setup == "cluster" else 0
                )
                try:
                    res = burst(s, args.burst, args.timeout)
                    res.update(lag(s, args.lag_n, args.spread, args.timeout))
                    if args.breakdown and run == args.runs - 1:
                        brk[(setup, rc)] = breakdown(s, args.breakdown_n, args.timeout)
                finally:
                    s.stop()
                print(
                    "  "
                    + ", ".join(
                        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in res.items()
                    ),
                    file=sys.stderr,
                    flush=True,
                )
                results[(setup, rc)].append(res)
    finally:
        witness.stop()
    print(
        f"# bench_replicas: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, Redis under test AOF {args.aof}, {WORKERS} workers per "
        f"replica, cluster: 3 masters, {args.shards} shards; medians of {args.runs} run(s) "
        f"(range in brackets), "
        f"{time.monotonic() - t0:.0f} s; replica logs: {logdir}\n"
    )
    print(report(results, args, brk))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "runs": {label(c): r for c, r in results.items()},
                    "breakdown": {label(c): b for c, b in brk.items()},
                    "args": vars(args),
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
