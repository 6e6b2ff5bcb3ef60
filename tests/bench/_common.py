"""Helpers shared by the CPU probes (probe_cpu.py, probe_shared_burst.py); not a test.

Everything here uses only APIs that exist in older trees too (d064214 on), so a probe can
run an older checkout through ``PYTHONPATH=<tree>``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")

# run inside each replica process: name each OS thread by its kind, then run `duetime run`
WRAPPER = r"""
import ctypes, re, sys, threading
libc = ctypes.CDLL(None)
def kind(name):
    if name.startswith("duetime-dispatch"):
        return "dispatcher"
    if re.fullmatch(r"duetime-.+-\d+", name):
        return "workers"
    return "others"
inner = threading.Thread._bootstrap_inner
def named(self):
    libc.prctl(15, kind(self.name).encode(), 0, 0, 0)
    inner(self)
threading.Thread._bootstrap_inner = named
libc.prctl(15, b"others", 0, 0, 0)
sys.argv = ["duetime", *sys.argv[1:]]
import os
if os.environ.get("BENCH_OTEL"):  # bench_otel.py: the replica's SDK
    import bench_otel
    bench_otel.install(os.environ["BENCH_OTEL"])
from scheduler.cli import main
main()
"""


def task_times(pid: int | str) -> dict[int, tuple[str, float, float]]:
    """tid -> (comm, user s, sys s) of every thread of ``pid`` now."""
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue  # exited meanwhile
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[int(tid)] = (comm, int(fields[11]) / TICK, int(fields[12]) / TICK)
    return out


def thread_ns(pid: int | str) -> dict[int, int]:
    """tid -> ns the thread has run on a CPU (``schedstat``: user + sys, exact, not in
    clock ticks, so short runs and many threads add up without rounding)."""
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except OSError:
            continue
    return out


def ns_delta(before: list[dict[int, int]], after: list[dict[int, int]]) -> float:
    """Seconds run between two ``thread_ns`` snapshots of each process (new threads from 0;
    threads that ended meanwhile are lost: a replica's threads live as long as it)."""
    return sum(n - b.get(t, 0) for b, a in zip(before, after) for t, n in a.items()) / 1e9


def procs_cpu(pids: list[int]) -> float:
    """user + sys seconds of the processes ``pids`` (all their threads, so far)."""
    tot = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tot += (int(fields[11]) + int(fields[12])) / TICK
    return tot


def redis_cpu(r: Any) -> float:
    """Redis's own CPU seconds so far (``INFO cpu``, user + sys)."""
    c = r.info("cpu")
    return float(c["used_cpu_user"]) + float(c["used_cpu_sys"])


def start_replicas(
    url: str, ns: str, count: int, log_level: str, named: bool = True, env: dict | None = None
) -> list[subprocess.Popen]:
    """``count`` ``duetime run`` processes (4 workers, lease 30 s, ``--import shared_tasks``)
    of the duetime on ``$PYTHONPATH``; ``named``: through WRAPPER (threads named by kind).
    ``log_level`` ``default`` passes none. Their output goes to /dev/null.

    They run from this directory (tests/bench): ``python -c`` puts the working directory
    first on sys.path, ahead of PYTHONPATH, so started from a checkout they would run that
    checkout's code, not the one on ``$PYTHONPATH``."""
    path = os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ if env is None else env, PYTHONPATH=path)
    head = [sys.executable, "-c", WRAPPER] if named else [sys.executable, "-m", "scheduler"]
    argv = [*head, "run", "--redis", url, "--namespace", ns, "--import", "shared_tasks"]
    argv += ["--workers", "4", "--lease", "30"]
    if log_level != "default":
        argv += ["--log-level", log_level]
    return [
        subprocess.Popen(
            argv, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(count)
    ]


def wait_up(r: Any, ns: str, count: int, deadline: float) -> None:
    """Until ``count`` replicas of ``ns`` have their presence key (epoch ``deadline``)."""
    while len(r.keys(f"duetime:{{{ns}}}:replica:*")) < count:
        if time.time() > deadline:
            raise SystemExit("the replicas were not up in time (the box is very loaded?)")
        time.sleep(0.01)


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each (a graceful `duetime run` exit: atexit hooks run), then wait."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def script_calls(commandstats: dict) -> int:  # type: ignore[type-arg]
    """Script calls in ``INFO commandstats``: a library's function (FCALL) or a script (EVALSHA)."""
    return sum(
        int(commandstats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha")
    )


def redis_counts(
    stats0: dict, cmds0: dict, stats1: dict, cmds1: dict, ours: int, runs: int
) -> dict[str, float]:
    """Per run, between two snapshots of ``INFO stats`` and ``INFO commandstats``: script
    calls (``calls``), commands, those inside scripts too (``commands``), and requests read
    (``reads``, ~ round trips: a pipeline is one). ``ours``: the probe's own commands
    between the two ``INFO stats`` (each counted once: a command after it has run, a read
    before, so the first snapshot's command and the second's read are in)."""
    delta = lambda f: stats1.get(f, 0) - stats0.get(f, 0) - ours  # noqa: E731
    return {
        "calls": (script_calls(cmds1) - script_calls(cmds0)) / runs,
        "commands": delta("total_commands_processed") / runs,
        "reads": delta("total_reads_processed") / runs,
    }


def succeeded(r: Any, ns: str) -> int:
    """The namespace's ``succeeded`` counter (every successful run, one-off or recurring)."""
    return int(r.hget(f"duetime:{{{ns}}}:stats", "succeeded") or 0)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 100]."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]
