"""The fault harness: a store Redis to fault, a witness Redis never faulted, an optional
proxy between them and the replicas, replica processes, an event recorder, a fault log,
and ``check()`` (I1-I7 over the whole history).

    with Harness(tmp_path, replicas=3, lease=2, proxy=True) as h:
        jobs = h.enqueue_many(100, seconds=0.5)
        h.kill_owner_of_running()
        assert h.wait_done(100, 30)
    report = h.check()   # after close: the history is complete
    assert report.ok, report.summary()

The store server runs with ``appendfsync always`` by default (the contract's scope).
Times in the fault log are wall-clock ms of this host (both servers share its clock).
"""

from __future__ import annotations

import pathlib
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis

from scheduler import Client
from scheduler.embedded import EmbeddedRedis
from scheduler.stores.redis.protocol.keys import Keys
from tests.faults.checker import Fault, History, Report, check, owner_pid
from tests.faults.fleet import Fleet, wait_until
from tests.faults.proxy import Proxy
from tests.faults.recorder import Recorder
from tests.faults.witness import Witness

TERMINAL_KINDS = ("succeeded", "failed", "dead_lettered", "abandoned")


def now_ms() -> float:
    return time.time() * 1000


class Harness:
    def __init__(
        self,
        tmp: pathlib.Path,
        *,
        replicas: int = 3,
        workers: int = 4,
        lease: float = 2.0,
        resync: float = 0.5,
        proxy: bool = False,
        skews: Sequence[float | None] = (),
        failpoints: Sequence[str | None] = (),
        appendonly: bool = True,
        appendfsync: str = "always",
        server_args: Sequence[str] = (),
        shutdown_timeout: float = 30.0,
        seed: int = 0,
    ) -> None:
        self.tmp, self.lease, self.resync = tmp, lease, resync
        self.store_server = EmbeddedRedis(
            data_dir=str(tmp / "store"),
            appendonly=appendonly,
            appendfsync=appendfsync,
            extra_args=server_args,
        )
        self.witness_server = EmbeddedRedis(data_dir=str(tmp / "witness"), appendonly=False)
        self._closed = False
        self.store_server.start()
        self.witness_server.start()
        self.ns = f"f{uuid.uuid4().hex[:8]}"
        self.keys = Keys(self.ns)
        self.witness = Witness(self.witness_server.url, f"w{uuid.uuid4().hex[:8]}")
        self.proxy = Proxy(self.store_server.port, seed) if proxy else None
        self.client = Client(self.store_server.url, namespace=self.ns)
        self.raw = redis.Redis.from_url(
            self.store_server.url, decode_responses=True, socket_timeout=5
        )
        self.recorder = Recorder(self.store_server.url, self.keys.events)
        self.faults: list[Fault] = []
        self.expected: set[str] = set()
        self.recurring: dict[str, int] = {}
        self.events: list[dict[str, Any]] = []
        self.event_gaps: list[tuple[str, int]] = []
        (tmp / "logs").mkdir(exist_ok=True)
        self.fleet = Fleet(
            self.replica_url,
            self.ns,
            self.witness.url,
            self.witness.key,
            count=replicas,
            workers=workers,
            lease=lease,
            resync=resync,
            log_dir=tmp / "logs",
            skews=skews,
            failpoints=failpoints,
            shutdown_timeout=shutdown_timeout,
        )

    @property
    def replica_url(self) -> str:
        return self.proxy.url if self.proxy else self.store_server.url

    # ---- producing --------------------------------------------------------------------

    def enqueue_many(
        self,
        n: int,
        *,
        task: str = "witness.work",
        seconds: float = 0.0,
        delay: float = 0.0,
        spread: float = 0.0,
        batch: int = 500,
        **options: Any,
    ) -> list[str]:
        """``n`` one-off jobs (due ``delay`` s from now, spread evenly over ``spread`` s);
        the acknowledged ids are expected to reach an outcome (I4)."""
        kwargs = {"seconds": seconds} if task == "witness.work" else {}
        ids: list[str] = []
        for start in range(0, n, batch):
            items = [
                {
                    "task": task,
                    "kwargs": kwargs,
                    "delay": delay + (spread * i / n if spread else 0.0),
                    **options,
                }
                for i in range(start, min(n, start + batch))
            ]
            got = self.client.enqueue_many(items)
            self.expected.update(got)
            ids += got
        return ids

    def every(self, job_id: str, period: float, task: str = "witness.hit") -> str:
        self.client.enqueue(task, every=period, job_id=job_id)
        self.recurring[job_id] = round(period * 1000)
        return job_id

    # ---- waiting ------------------------------------------------------------------------

    def replicas_up(self, n: int | None = None, timeout: float = 30) -> bool:
        want = len(self.fleet.procs) if n is None else n
        return wait_until(lambda: len(self.raw.keys(self.keys.replica("*"))) >= want, timeout)

    def wait_done(self, n: int, timeout: float) -> bool:
        """Until ``n`` of the expected one-off jobs have a committed outcome (succeeded,
        failed, dead-lettered or abandoned: read from the recorded events, so recurring
        runs do not count)."""
        seen = [0]
        done: set[str] = set()

        def count() -> bool:
            events = self.recorder.snapshot()
            for e in events[seen[0] :]:
                if e["kind"] in TERMINAL_KINDS and e["job"] in self.expected:
                    done.add(e["job"])
            seen[0] = len(events)
            return len(done) >= n

        return wait_until(count, timeout, 0.1)

    def running(self) -> list[dict[str, Any]]:
        """Open claims from the recorded events: inv, attempt, pid, at."""
        open_: dict[str, dict[str, Any]] = {}
        for e in self.recorder.snapshot():
            if e["sched"] is None:
                continue
            inv = f"{e['job']}@{e['sched']}"
            if e["kind"] == "claimed":
                open_[inv] = {
                    "inv": inv,
                    "attempt": e["attempt"],
                    "pid": owner_pid(e["detail"]),
                    "at": e["at"],
                }
            elif e["kind"] in ("succeeded", "failed", "retried", "released", "lease_lost"):
                open_.pop(inv, None)
        return list(open_.values())

    # ---- faults ---------------------------------------------------------------------------

    def note(
        self, kind: str, at_ms: float, until_ms: float | None = None, pid: int | None = None
    ) -> None:
        self.faults.append(Fault(kind, at_ms, until_ms, pid))

    def kill(self, i: int, restart: bool = True) -> int:
        """SIGKILL replica ``i`` (and start a fresh one in its slot); returns its pid."""
        pid = self.fleet.pids[i]
        self.note("kill", self.fleet.kill(i), pid=pid)
        if restart:
            self.fleet.restart(i)
        return pid

    def pause(self, i: int, seconds: float) -> int:
        """SIGSTOP replica ``i`` for ``seconds``, then SIGCONT."""
        pid = self.fleet.pids[i]
        at = now_ms()
        self.fleet.signal(i, signal.SIGSTOP)
        time.sleep(seconds)  # the fault's duration, not a synchronisation
        self.fleet.signal(i, signal.SIGCONT)
        self.note("stop", at, now_ms(), pid)
        return pid

    def outage(self, seconds: float, how: str = "blackhole") -> float:
        """Redis unreachable for ``seconds``: ``blackhole`` or ``reset`` at the proxy, or
        ``sigstop`` the server. Returns the wall time (ms) it healed."""
        at = now_ms()
        if how == "sigstop":
            self.store_server._box[0].send_signal(signal.SIGSTOP)
        else:
            assert self.proxy is not None, "a proxy outage needs Harness(proxy=True)"
            getattr(self.proxy, how)()
        time.sleep(seconds)  # the fault's duration
        if how == "sigstop":
            self.store_server._box[0].send_signal(signal.SIGCONT)
        else:
            assert self.proxy is not None
            self.proxy.heal()
        healed = now_ms()
        self.note("outage", at, healed)
        return healed

    def failpoint_hits(self) -> list[tuple[str, str, int, float]]:
        """(point, action, pid, wall ms) of every failpoint that fired (replica logs)."""
        hits = []
        for line in self.fleet.log_text().splitlines():
            if line.startswith("FAILPOINT "):
                words = line.split()
                point, _, action = words[1].partition("=")
                hits.append((point, action, int(words[5]), float(words[7])))
        return hits

    def until(self, predicate: Callable[[], Any], timeout: float) -> bool:
        return wait_until(predicate, timeout)

    # ---- the end ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the replicas (SIGTERM), drain the recorder, stop the servers."""
        if self._closed:
            return
        self._closed = True
        try:
            self.codes = self.fleet.stop()
            if self.proxy:
                self.proxy.close()
            self.events = self.recorder.drain()
            self.event_gaps = list(self.recorder.gaps)
            self.execs = self.witness.log()
            self.fenced_rejects = self.witness.total("rejects")
            self.writes = self.witness.count("writes")
            self.fenced_writes = sum(self.writes.values())
            self.logs = self.fleet.log_text()
            self.hits = self.failpoint_hits()
        finally:
            self.client.close()
            self.raw.close()
            self.witness.close()
            self.store_server.stop()
            self.witness_server.stop()

    def history(self, drained: bool = True) -> History:
        self.close()
        faults = list(self.faults)
        for point, action, pid, at in self.hits:  # crash failpoints are owner deaths too
            if action == "crash":
                faults.append(Fault("crash", at, pid=pid))
            elif action == "stop":
                faults.append(Fault("stop", at, pid=pid))
            elif point == "renew" and action == "fail":
                faults.append(Fault("renew_fail", at, pid=pid))
        return History(
            events=self.events,
            execs=self.execs,
            expected=set(self.expected),
            lease_ms=round(self.lease * 1000),
            recurring=dict(self.recurring),
            faults=faults,
            drained=drained,
            stale_commits_rejected=self.logs.count("stale commit rejected"),
            fenced_rejects=self.fenced_rejects,
            event_gaps=self.event_gaps,
        )

    def check(self, drained: bool = True) -> Report:
        return check(self.history(drained))

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
