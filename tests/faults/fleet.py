"""Replicas as real processes (``python -m scheduler run``) for fault tests.

Each replica imports ``tests.faults.witness`` (its tasks record every execution in the
witness Redis), logs to ``<log_dir>/replica-<i>.log`` and runs in its own session, so a
test can SIGKILL, SIGSTOP or SIGTERM it like an orchestrator would. ``restart(i)`` starts a
fresh process in slot ``i`` (a new pid, same settings).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from scheduler.embedded import spawn_tied

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAILPOINTS = "DUETIME_FAILPOINTS"


class Fleet:
    """``count`` replica processes of one namespace. ``skews[i]`` offsets replica i's wall
    clock by that many seconds; ``failpoints[i]`` is its ``$DUETIME_FAILPOINTS``."""

    def __init__(
        self,
        url: str,
        namespace: str,
        witness_url: str,
        witness_key: str,
        *,
        count: int = 3,
        workers: int = 4,
        lease: float = 5.0,
        resync: float = 1.0,
        log_dir: pathlib.Path,
        skews: Sequence[float | None] = (),
        failpoints: Sequence[str | None] = (),
        shutdown_timeout: float = 30.0,
        imports: Sequence[str] = ("tests.faults.witness",),
        shift: float | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        self.url, self.namespace, self.log_dir = url, namespace, log_dir
        self._env = dict(
            os.environ, WITNESS_URL=witness_url, WITNESS_KEY=witness_key, PYTHONPATH=str(ROOT)
        )
        self._env.pop(FAILPOINTS, None)
        self._cmd = [
            "run",
            "--redis",
            url,
            "--namespace",
            namespace,
            *[a for m in imports for a in ("--import", m)],
            "--workers",
            str(workers),
            "--lease",
            str(lease),
            "--resync",
            str(resync),
            "--log-level",
            "WARNING",
            "--shutdown-timeout",
            str(shutdown_timeout),
            *extra,
        ]
        self.shift = shift  # every replica *and* its store live shift s ahead (shifted.py)
        self.skews = list(skews) + [None] * (count - len(skews))
        self.failpoints = list(failpoints) + [None] * (count - len(failpoints))
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[Any] = []
        self.started = 0
        for i in range(count):
            self.procs.append(self._spawn(i))

    def _spawn(self, i: int, failpoints: str | None = None) -> subprocess.Popen[bytes]:
        skew = self.skews[i]
        prefix = ["-m", "scheduler"] if skew is None else ["-m", "tests.faults.skewed", str(skew)]
        if self.shift is not None:
            prefix = ["-m", "tests.integration.shifted", repr(self.shift)]
        env = dict(self._env)
        armed = failpoints if failpoints is not None else self.failpoints[i]
        if armed:
            env[FAILPOINTS] = armed
        log = open(self.log_dir / f"replica-{i}.log", "ab")  # noqa: SIM115 (closed in stop)
        self._logs.append(log)
        self.started += 1
        return spawn_tied(
            [sys.executable, *prefix, *self._cmd],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def add(self, count: int = 1) -> None:
        """``count`` more replicas (no skew, no failpoints), in new slots."""
        for _ in range(count):
            self.skews.append(None)
            self.failpoints.append(None)
            self.procs.append(self._spawn(len(self.procs)))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def index_of(self, pid: int) -> int:
        return self.pids.index(pid)

    def kill(self, i: int) -> float:
        """SIGKILL replica ``i``; returns the wall time (ms) by which it is dead (the
        process reaped): nothing it does is later than that."""
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait(10)
        return time.time() * 1000

    def restart(self, i: int, failpoints: str | None = None) -> int:
        """Start a fresh process in slot ``i`` (after it died); returns its pid. Its
        failpoints are the slot's unless ``failpoints`` is given ("" for none)."""
        if self.procs[i].poll() is None:
            raise RuntimeError(f"replica {i} (pid {self.procs[i].pid}) is still running")
        self.procs[i] = self._spawn(i, failpoints)
        return self.procs[i].pid

    def signal(self, i: int, sig: int) -> None:
        self.procs[i].send_signal(sig)

    def stop(self, timeout: float = 20) -> list[int | None]:
        """SIGTERM every live replica (SIGCONT first, in case one is stopped); wait up to
        ``timeout`` s, then SIGKILL. Returns the exit codes (None: had to be killed)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
                codes.append(None)
        for log in self._logs:
            log.close()
        return codes

    def log_text(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob("replica-*.log"))
        )


@contextmanager
def replicas(url: str, namespace: str, witness_key: str, **kw: Any) -> Iterator[Fleet]:
    """A fleet whose witness is the store's own server (for faults that never touch it),
    unless ``witness_url=`` names another."""
    fleet = Fleet(url, namespace, kw.pop("witness_url", None) or url, witness_key, **kw)
    try:
        yield fleet
    finally:
        fleet.stop()


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> bool:
    """Poll a cross-process condition (no signal crosses processes) up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def witness_log(client: Any, key: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in client.lrange(f"{key}:log", 0, -1)]
