"""``duetime demo``: the shared mode in one command.

Starts a Redis (embedded unless a URL is given), three replica processes and a producer
(this process); enqueues one-off and recurring jobs; kills one replica with SIGKILL while
it runs jobs (one the witness log shows running a job at that moment); prints a live
table; and ends with the proof: every one-off enqueued ran, every invocation ran to its
end, none ran twice except the killed replica's, and each invocation it had in flight was
taken over by the others (attempt 2, higher fence) after its lease expired.

Each execution is recorded by the demo task itself, in a list the scheduler does not
manage (``duetime:{ns}:demo:log``), so the proof does not trust the scheduler's own books.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scheduler.stores.redis.integrity import upkeep
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.reading import fleet, queries
from scheduler.tasks import task

if TYPE_CHECKING:
    from scheduler.stores.redis import RedisStore

LOG_ENV = "DUETIME_DEMO_URL"


@task("duetime.demo.work")
def work(seconds: float = 0.3) -> None:
    """The demo's job: record who runs which invocation, then work for a moment."""
    from scheduler import current_invocation
    from scheduler.stores.redis.protocol import urls

    inv = current_invocation()
    r = urls.connect(os.environ[LOG_ENV])
    ns = os.environ["DUETIME_NAMESPACE"]
    r.rpush(
        Keys(ns).app("demo:log"),
        json.dumps(
            {
                "inv": inv.invocation_id,
                "job": inv.job_id,
                "attempt": inv.attempt,
                "fence": inv.fence,
                "pid": os.getpid(),
            }
        ),
    )
    inv.token.wait(seconds)
    r.hincrby(Keys(ns).app("demo:done"), inv.invocation_id, 1)


@dataclass
class Report:
    invocations: int = 0
    executions: int = 0
    completed: int = 0
    reruns: list[dict[str, Any]] = field(default_factory=list)
    per_pid: Counter[int] = field(default_factory=Counter)
    killed_pid: int | None = None
    in_flight: list[str] = field(default_factory=list)  # the killed replica's, at its death
    lost: list[str] = field(default_factory=list)  # one-offs enqueued that never ran
    doubled: list[str] = field(default_factory=list)  # ran twice, not a takeover
    bad_reruns: list[dict[str, Any]] = field(default_factory=list)  # repeats of no takeover

    @property
    def ok(self) -> bool:
        """Nothing lost: every one-off enqueued ran, and every invocation ran to its end;
        nothing doubled: an invocation ran again only when the killed replica had started
        it, and then as a takeover (attempt 2+, a higher fence); and the kill showed one:
        the killed replica had work in flight, and each piece was run again by another."""
        proved = self.invocations > 0 and self.killed_pid is not None and bool(self.in_flight)
        taken = {r["inv"] for r in self.reruns if r["pid"] != self.killed_pid}
        every_taken_over = all(inv in taken for inv in self.in_flight)
        clean = not (self.lost or self.doubled or self.bad_reruns)
        return proved and clean and self.completed == self.invocations and every_taken_over


def run(url: str, *, seconds: float = 6.0, echo: Callable[[str], None] = print) -> Report:
    """Run the demo against ``url`` (``redis://`` or ``redis+sentinel://``) and return what
    the witness log says."""
    from scheduler.client import Client
    from scheduler.stores.redis import RedisStore
    from scheduler.stores.redis.protocol import urls

    ns = f"demo-{uuid.uuid4().hex[:6]}"
    r = urls.connect(url, decode_responses=True)
    store = RedisStore(r, ns)  # read-side queries of the namespace (no subscriber runs)
    env = dict(os.environ, **{LOG_ENV: url, "DUETIME_NAMESPACE": ns})
    cmd = _replica_command(url, ns)
    procs = [
        subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(3)
    ]
    report = Report()
    try:
        _wait(lambda: len(fleet.replicas(store)) == 3, 20)
        echo(f"3 replicas up (pids {', '.join(str(p.pid) for p in procs)}), namespace {ns}")
        with Client(url, namespace=ns) as client:
            expected = [
                client.enqueue("duetime.demo.work", delay=0.2 + i * seconds / 48) for i in range(24)
            ]
            for name in ("every-700ms", "every-1s"):
                client.enqueue(
                    "duetime.demo.work",
                    every=0.7 if "700" in name else 1.0,
                    job_id=name,
                    kwargs={"seconds": 0.1},
                )
            t0, killed = time.monotonic(), False
            while time.monotonic() - t0 < seconds:
                log = _log(r, ns)
                if not killed and time.monotonic() - t0 > seconds / 3:
                    victim = _busy(r, ns, log, procs)
                    if victim is not None:  # else look again: a replica that runs a job now
                        victim.send_signal(signal.SIGKILL)
                        victim.wait()
                        report.killed_pid, killed = victim.pid, True
                        report.in_flight = _in_flight(r, ns, victim.pid)
                        echo(
                            f"-- killed replica {victim.pid} with SIGKILL while it ran "
                            f"{len(report.in_flight)} job(s) --"
                        )
                        continue
                _table(echo, log, procs, report.killed_pid, time.monotonic() - t0)
                time.sleep(0.5 if killed else 0.05)
            for name in ("every-700ms", "every-1s"):
                client.cancel(name)
        _wait(lambda: _settled(store), 10)
        _tally(report, r, ns, expected)
        return report
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        upkeep.delete_namespace(store)  # leave nothing behind in the user's Redis
        store.close()


def _replica_command(url: str, ns: str) -> list[str]:
    """``duetime run`` for one demo replica: short leases, so a takeover shows quickly."""
    return [
        sys.executable,
        "-m",
        "scheduler",
        "run",
        "--redis",
        url,
        "--namespace",
        ns,
        "--import",
        "scheduler.cli.demo_shared",
        "--workers",
        "2",
        "--lease",
        "1.5",
        "--resync",
        "1",
        "--log-level",
        "ERROR",
    ]


def _busy(
    r: Any, ns: str, log: list[dict[str, Any]], procs: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes] | None:
    """A live replica that is running a demo job now (per the witness log), or None."""
    done = r.hgetall(Keys(ns).app("demo:done"))
    running = {e["pid"] for e in log if not int(done.get(e["inv"], 0))}
    return next((p for p in procs if p.pid in running and p.poll() is None), None)


def _in_flight(r: Any, ns: str, pid: int) -> list[str]:
    """The invocations replica ``pid`` had started and not finished when it died."""
    done = r.hgetall(Keys(ns).app("demo:done"))
    return sorted({e["inv"] for e in _log(r, ns) if e["pid"] == pid and not done.get(e["inv"])})


def _tally(report: Report, r: Any, ns: str, expected: Sequence[str]) -> None:
    """Fill ``report`` from the witness log: executions, reruns, completions, and what
    was lost, doubled or repeated without a takeover."""
    log = _log(r, ns)
    done = r.hgetall(Keys(ns).app("demo:done"))
    first: dict[str, dict[str, Any]] = {}
    for e in log:
        if e["inv"] not in first:
            first[e["inv"]] = e
            continue
        report.reruns.append(e)
        was = first[e["inv"]]
        if was["pid"] != report.killed_pid or e["attempt"] < 2 or e["fence"] <= was["fence"]:
            report.bad_reruns.append(e)
    report.invocations = len(first)
    report.executions = len(log)
    report.completed = sum(1 for inv in first if int(done.get(inv, 0)) >= 1)
    report.doubled = sorted(
        inv
        for inv, e in first.items()
        if int(done.get(inv, 0)) > 1 and e["pid"] != report.killed_pid
    )
    ran = {e["job"] for e in log}
    report.lost = [job for job in expected if job not in ran]
    report.per_pid = Counter(e["pid"] for e in log)


def _log(r: Any, ns: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in r.lrange(Keys(ns).app("demo:log"), 0, -1)]


def _settled(store: RedisStore) -> bool:
    """Nothing running and nothing due: every started invocation has finished."""
    return queries.running_count(store) == 0 and not any(queries.due_now(store).values())


def _table(
    echo: Callable[[str], None],
    log: list[dict[str, Any]],
    procs: list[subprocess.Popen[bytes]],
    killed: int | None,
    t: float,
) -> None:
    runs = Counter(e["pid"] for e in log)
    cells = []
    for p in procs:
        state = "KILLED" if p.pid == killed else "alive"
        cells.append(f"{p.pid}:{state}:{runs.get(p.pid, 0):>3} runs")
    reruns = sum(1 for e in log if e["attempt"] >= 2)
    echo(f"{t:5.1f}s  " + "  ".join(cells) + f"  | takeovers (attempt 2+): {reruns}")


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()
