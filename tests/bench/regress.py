#!/usr/bin/env python3
"""Issue 15's no-regression check, before against after, in one command (not a test).

"before" is a ``git archive`` of ``--before`` (default d064214, main before issue 15's
hot-path work) in a temporary directory; "after" is this checkout as it is. Both run the
same benchmark scripts (this checkout's, copied into the before tree), alternately in
each round (before, after; then after, before: drifts of the shared box hit both alike):

* ``probe``: ``probe_cpu.py --mode shared --replicas 3 --kind K`` for K in noop,
  recurring, cron, args200, retry: Redis and replica CPU per run, jobs/s, lag;
* ``lag``: ``bench_shared.py --only lag idle --systems duetime1 duetime3``: lag of 2,000
  jobs over 5 s (1 and 3 replicas), idle Redis commands/s per replica;
* ``cluster``: ``bench_replicas.py --setups cluster --shards 16 --replicas 3``: a 20,000-job
  burst and the lag run on a local 3-master Redis Cluster, namespace in 16 shards;
* ``claims``: ``bench_cluster.py --setups cluster --shards 16``: claim.lua alone, 4
  processes claiming 50,000 due jobs in batches of 100 over the 16 shards;
* ``scale``: ``bench_scale.py --only redis --sizes 100000 1000000``: script time per call
  (claim, schedule, complete) with 10^5 and 10^6 pending, and Redis memory per pending job
  (``hash-max-listpack-value 128``, ~94 B definitions); ``--scale-runs`` rounds only;
* ``backlog``: the ``recurring`` probe with 10^6 other jobs pending (``--backlog-runs``).

    PYTHONPATH=$PWD /work/main/.venv/bin/python tests/bench/regress.py   # ~50 min
    ... regress.py --only probe lag --runs 3 --out /tmp/r.txt            # a part

Every command's output goes to ``--out`` (default tests/bench/results-regress.txt), the
summary table (medians, min-max, after/before, verdict) last, also on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = ("_common.py", "shared_tasks.py", "probe_cpu.py", "bench_shared.py")
SCRIPTS += ("bench_replicas.py", "bench_scale.py", "bench_cluster.py")
KINDS = ("noop", "recurring", "cron", "args200", "retry")
SCENARIOS = ("probe", "lag", "cluster", "claims", "scale", "backlog")
CPU = ("low", 1.10)  # lower is better, at most 10 % worse
NO_WORSE = ("low", 1.00)


def before_tree(rev: str) -> str:
    """A copy of revision ``rev`` of this checkout (``git archive``), with this checkout's
    benchmark scripts; exits with one line if git does not know ``rev``."""
    sha = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--verify", "--short", f"{rev}^{{commit}}"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if not sha:
        print(f"regress.py: --before {rev!r} is not a revision of this checkout (a commit)",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    tree = tempfile.mkdtemp(prefix=f"regress-{sha}-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    for name in SCRIPTS:  # the same benchmark code on both sides
        shutil.copy(os.path.join(HERE, name), os.path.join(tree, "tests", "bench", name))
    return tree


class Runner:
    def __init__(self, out: str, quick: bool) -> None:
        self.out, self.quick = open(out, "a"), quick  # each run after the earlier ones
        self.figs: dict[tuple[str, str, str], list[float]] = {}  # (scenario, metric, side)

    def run(self, tree: str, args: list[str], side: str) -> dict:
        """Run tests/bench/<args> in ``tree``; its --json output, parsed."""
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        argv = [sys.executable, os.path.join(tree, "tests", "bench", args[0]), *args[1:]]
        argv += ["--json", path]
        env = dict(os.environ, PYTHONPATH=tree)
        head = f"\n## {side}: {' '.join(args)}  [{time.strftime('%H:%M:%S')}, load "
        self.log(head + f"{os.getloadavg()[0]:.2f}, tree {tree}]")
        p = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
        self.log(p.stdout + p.stderr[-4000:])
        if p.returncode:
            self.log(f"!! exit {p.returncode}")
            return {}
        with open(path) as f:
            return dict(json.load(f))

    def log(self, text: str) -> None:
        self.out.write(text.rstrip() + "\n")
        self.out.flush()
        print(text.strip().splitlines()[0] if text.strip() else "", file=sys.stderr, flush=True)

    def add(self, scenario: str, metric: str, side: str, value: object) -> None:
        if isinstance(value, (int, float)):
            self.figs.setdefault((scenario, metric, side), []).append(float(value))


def probe(r: Runner, trees: dict[str, str], kind: str, pending: int = 0) -> None:
    names = list(trees)
    args = ["probe_cpu.py", "--mode", "shared", "--replicas", "3", "--kind", kind, "--runs", "1"]
    args += ["--compare", ",".join(f"{n}={trees[n]}" for n in names)]
    if r.quick:
        jobs = {"recurring": "300", "cron": "100"}.get(kind, "3000")
        args += ["--jobs", jobs, "--rounds", "4"]
    if pending:
        args += ["--pending", str(pending)]
    res = r.run(trees["after"], args, "both (" + ",".join(names) + ")")
    if not res:  # e.g. replicas too slow to start on a loaded box: once more
        res = r.run(trees["after"], args, "both, again (" + ",".join(names) + ")")
    scenario = f"{kind}, {pending:,} pending" if pending else kind
    for side, runs in res.get("runs", {}).items():
        for m in runs:
            r.add(scenario, "Redis + replicas CPU µs/run", side, m.get("exact"))
            r.add(scenario, "Redis CPU µs/run", side, m["redis_user"] + m["redis_sys"])
            r.add(scenario, "replicas CPU µs/run", side, m.get("replicas"))
            if kind in ("recurring", "cron"):
                r.add(scenario, "lag p50 ms", side, m.get("lag_p50"))
                r.add(scenario, "lag p99 ms", side, m.get("lag_p99"))
            else:
                r.add(scenario, "jobs/s", side, m.get("jobs_s"))


def lag_idle(r: Runner, tree: str, side: str) -> None:
    args = ["bench_shared.py", "--only", "lag", "idle", "--systems", "duetime1", "duetime3"]
    res = r.run(tree, [*args, "--runs", "1"] + (["--quick"] if r.quick else []), side)
    for system, m in res.get("median", {}).items():
        r.add(f"lag, {system}", "lag p50 ms", side, m.get("lag_p50"))
        r.add(f"lag, {system}", "lag p99 ms", side, m.get("lag_p99"))
        r.add("idle", f"Redis commands/s per replica, {system}", side, m.get("idle_cmds_s_proc"))


def cluster(r: Runner, tree: str, side: str) -> None:
    args = ["bench_replicas.py", "--setups", "cluster", "--shards", "16", "--replicas", "3"]
    args += ["--runs", "1", "--no-breakdown"] + (["--quick"] if r.quick else [])
    res = r.run(tree, args, side)
    for m in res.get("runs", {}).get("cluster, 3 replicas", []):
        s = "cluster, 16 shards, 3 replicas"
        r.add(s, "burst: Redis CPU µs/job", side, m.get("burst_redis_us_job"))
        r.add(s, "burst: replicas CPU µs/job", side, m.get("burst_replicas_us_job"))
        r.add(s, "burst: jobs/s", side, m.get("burst_done_jobs_s"))
        r.add(s, "lag p50 ms", side, m.get("lag_p50"))
        r.add(s, "lag p99 ms", side, m.get("lag_p99"))


def claims(r: Runner, tree: str, side: str) -> None:
    args = ["bench_cluster.py", "--setups", "cluster", "--shards", "16", "--runs", "1"]
    res = r.run(tree, [*args, "--jobs", "5000" if r.quick else "50000"], side)
    for m in res.get("runs", {}).get("cluster/16", []):
        s = "cluster, 16 shards: claim.lua alone"
        r.add(s, "claims/s (4 processes, 100 per call)", side, m.get("claims_per_s"))
        r.add(s, "Redis CPU ms per 1k claims", side, m.get("redis_cpu_ms_per_1k"))


def scale(r: Runner, tree: str, side: str) -> None:
    sizes = ["10000", "20000"] if r.quick else ["100000", "1000000"]
    args = ["bench_scale.py", "--only", "redis", "--sizes", *sizes, "--runs", "1"]
    res = r.run(tree, [*args, "--plots", ""] + (["--samples", "200"] if r.quick else []), side)
    for n, m in ((res.get("raw") or {}).get("redis") or [{}])[0].items():
        s = f"{int(n):,} pending"
        for op in ("claim", "schedule", "complete"):
            r.add(s, f"{op}: script µs/call (SLOWLOG)", side, m.get(f"{op}_redis"))
        r.add(s, "Redis memory B/pending job", side, m.get("mem_per_job"))


METRIC_RULES = {  # metric name -> (better, limit of after/before); default CPU
    "jobs/s": ("high", 1.10),
    "burst: jobs/s": ("high", 1.10),
    "claims/s (4 processes, 100 per call)": ("high", 1.10),
    "Redis memory B/pending job": ("low", None),  # absolute: <= 420 B
}


def rule(scenario: str, metric: str) -> tuple[str, float | None]:
    if scenario.startswith(("lag, ", "idle")) and ("p99" in metric or "idle" in scenario):
        return NO_WORSE  # "lag p99 and idle cost no worse than main's"
    return METRIC_RULES.get(metric, CPU)


def summary(r: Runner, before: str) -> str:
    lines = [f"| scenario | figure | before ({before}) | after | after/before | rule | verdict |"]
    lines.append("|---|---|---:|---:|---:|---|---|")
    keys = dict.fromkeys((s, m) for s, m, _ in r.figs)
    for s, m in keys:
        b, a = r.figs.get((s, m, "before"), []), r.figs.get((s, m, "after"), [])
        if not b or not a:
            continue
        mb, ma = statistics.median(b), statistics.median(a)
        better, limit = rule(s, m)
        ratio = ma / mb if mb else float("nan")
        if limit is None:
            ok, what = ma <= 420, "≤ 420 B"
        elif better == "high":
            ok, what = ratio >= 1 / limit, f"≥ {1 / limit:.2f}×"
        else:
            ok, what = ratio <= limit, f"≤ {limit:.2f}×"
        off = f" ({(ratio - 1) * 100:+.0f} %)" if not ok and limit else ""

        def cell(v: list[float]) -> str:
            med = statistics.median(v)
            return f"{med:,.1f}" + (f" ({min(v):,.1f}–{max(v):,.1f})" if len(v) > 1 else "")

        lines.append(
            f"| {s} | {m} | {cell(b)} | {cell(a)} | {ratio:.2f} | {what} | "
            f"{'met' if ok else '**not met**' + off} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="d064214", help="git revision of the before tree")
    ap.add_argument("--runs", type=int, default=3, help="rounds (medians over them)")
    ap.add_argument("--scale-runs", type=int, default=1, help="rounds with the 10^6 scale run")
    ap.add_argument("--backlog-runs", type=int, default=1, help="rounds with the backlog probe")
    ap.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--out", default=os.path.join(HERE, "results-regress.txt"), help="appended to")
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes")
    a = ap.parse_args()
    trees = {"before": before_tree(a.before), "after": ROOT}
    r = Runner(a.out, a.quick)
    r.log(f"\n# regress.py: before = {a.before} ({trees['before']}), after = {ROOT} @ "
          + subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                           capture_output=True, text=True).stdout.strip()
          + f"; {a.runs} round(s); {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")  # fmt: skip
    t0 = time.monotonic()
    for i in range(a.runs):
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
        ordered = {n: trees[n] for n in order}
        r.log(f"\n# round {i + 1}/{a.runs}, order {order}")
        if "probe" in a.only:
            for kind in a.kinds:
                probe(r, ordered, kind)
        for name, fn in (("lag", lag_idle), ("cluster", cluster), ("claims", claims)):
            if name in a.only:
                for side in order:
                    fn(r, trees[side], side)
        if "scale" in a.only and i < a.scale_runs:
            for side in order:
                scale(r, trees[side], side)
        if "backlog" in a.only and i < a.backlog_runs:
            probe(r, ordered, "recurring", pending=20_000 if a.quick else 1_000_000)
    table = summary(r, a.before)
    r.log(f"\n# summary ({time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.2f})\n")
    r.out.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
