"""Run replica processes (``duetime run``) for integration tests."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

ROOT = pathlib.Path(__file__).resolve().parents[2]


class Replicas:
    def __init__(self, url: str, namespace: str, witness_key: str, *, count: int = 3,
                 workers: int = 4, lease: float = 5.0, resync: float = 1.0,
                 log_dir: pathlib.Path, skews: list[float] | None = None,
                 shift: float | None = None, witness_url: str | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        """``skews``: per-replica offsets of the process clock (Redis TIME still rules);
        ``shift``: one offset for every replica *and* its store (see shifted.py)."""
        env = dict(os.environ, WITNESS_URL=witness_url or url, WITNESS_KEY=witness_key,
                   PYTHONPATH=str(ROOT))
        cmd = ["run", "--redis", url, "--namespace",
               namespace, "--import", "tests.integration.witness", "--workers", str(workers),
               "--lease", str(lease), "--resync", str(resync), "--log-level", "WARNING",
               *extra]
        self.procs = []
        for i in range(count):
            skew = (skews or [])[i] if i < len(skews or []) else None
            prefix = (["-m", "scheduler"] if skew is None
                      else ["-m", "tests.integration.skewed", str(skew)])
            if shift is not None:
                prefix = ["-m", "tests.integration.shifted", repr(shift)]
            log = open(log_dir / f"replica-{i}.log", "wb")  # noqa: SIM115 (closed in stop)
            self.procs.append((subprocess.Popen([sys.executable, *prefix, *cmd], cwd=ROOT,
                                                env=env, stdout=log,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True), log))

    def kill(self, i: int) -> None:
        self.procs[i][0].send_signal(signal.SIGKILL)
        self.procs[i][0].wait(10)

    def signal(self, i: int, sig: int) -> None:
        self.procs[i][0].send_signal(sig)

    def stop(self, timeout: float = 20) -> list[int | None]:
        for p, _ in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = []
        for p, log in self.procs:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(None)
            log.close()
        return codes


@contextmanager
def replicas(*args: object, **kw: object) -> Iterator[Replicas]:
    r = Replicas(*args, **kw)  # type: ignore[arg-type]
    try:
        yield r
    finally:
        r.stop()


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    """Poll a cross-process condition (no signal crosses processes) up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def witness_log(client, key: str) -> list[dict]:
    return [json.loads(x) for x in client.lrange(f"{key}:log", 0, -1)]
