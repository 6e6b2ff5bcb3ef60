"""Honest signals of ``duetime run`` as real processes on a real redis-server (issue 13):
a replica stopped with SIGTERM leaves the live set at once.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from scheduler.stores.redis import RedisStore, queries
from tests.faults.fleet import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JOBS = 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not listening yet
        return 0, str(exc)


class Replica:
    """``duetime run`` at its default log level, with the endpoint on a free port."""

    def __init__(self, url: str, ns: str, log: Path, metrics: bool) -> None:
        self.port = free_port()
        self.log = log
        argv = [sys.executable, "-m", "scheduler", "run", "--redis", url, "--namespace", ns]
        argv += ["--import", "tests.helpers", "--workers", "2", "--resync", "0.5"]
        if metrics:
            argv += ["--metrics-port", str(self.port)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def get(self, path: str) -> tuple[int, str]:
        return get(f"http://127.0.0.1:{self.port}{path}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in a text exposition (labels in any order)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
        if found == labels:
            return float(line.rsplit(" ", 1)[1])
    return None


def live(store: RedisStore) -> set[str]:
    return {r["id"] for r in queries.replicas(store)}


def test_a_replica_stopped_with_sigterm_leaves_the_live_set_at_once(redis_url, redis_ns, tmp_path):
    """Its ``replica:<id>`` key (TTL 3 leases: 90 s here) is deleted by the shutdown, so
    ``duetime stats`` stops listing it as soon as the process has exited."""
    store = RedisStore(redis_url, redis_ns)
    a = Replica(redis_url, redis_ns, tmp_path / "a.log", metrics=False)
    b = Replica(redis_url, redis_ns, tmp_path / "b.log", metrics=False)
    try:
        assert wait_until(lambda: len(live(store)) == 2, 30), a.log.read_text()
        ids = live(store)
        (a_id,) = [i for i in ids if f"-{a.proc.pid}-" in i]
        assert a.stop() == 0, a.log.read_text()
        assert live(store) == ids - {a_id}  # at once: no wait for the key's TTL
        assert b.stop() == 0, b.log.read_text()
        assert live(store) == set()
    finally:
        a.kill()
        b.kill()
        store.close()
