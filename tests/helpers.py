"""Small test helpers: recorders and job builders (signals, never sleeps)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler import task
from scheduler.model import After, Every, JobSpec, Schedule

WAIT = 5.0  # real seconds a test waits for a signal before it fails


def spec(job_id: str, schedule: Schedule | None = None, **kw: Any) -> JobSpec:
    return JobSpec(job_id=job_id, target=noop, schedule=schedule or After(0.0), **kw)


def every(job_id: str, interval: float, **kw: Any) -> JobSpec:
    return spec(job_id, Every(interval), **kw)


@task("tests.noop")
def noop(**_payload: object) -> None:
    """Does nothing, with any arguments (tests give it payloads of every shape)."""


@task("tests.switch_interval")
def switch_interval() -> float:
    """The switch interval (seconds) of the process running it."""
    import sys

    return sys.getswitchinterval()


@task("tests.gc_frozen")
def gc_frozen() -> int:
    """How many objects the process running it keeps out of garbage collection."""
    import gc

    return gc.get_freeze_count()


@task("tests.block")
def block(seconds: float = 60.0) -> None:
    """Hold a worker (a job a shutdown cannot wait for)."""
    time.sleep(seconds)


class Recorder:
    """Collects (label, fake time) of job starts, in start order."""

    def __init__(self, clock: Any = None) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.starts: list[tuple[str, float]] = []
        self.changed = threading.Condition(self.lock)

    def job(self, label: str, body: Callable[[], Any] | None = None) -> Callable[[], Any]:
        def run() -> Any:
            with self.lock:
                self.starts.append((label, self.clock.now() if self.clock else 0.0))
                self.changed.notify_all()
            return body() if body else None

        return run

    def labels(self) -> list[str]:
        with self.lock:
            return [label for label, _ in self.starts]

    def wait_for(self, count: int, timeout: float = WAIT) -> bool:
        with self.lock:
            return self.changed.wait_for(lambda: len(self.starts) >= count, timeout)


class Blocking:
    """An ``AsyncClient`` seen through ``Client``'s sync interface: each call runs its
    coroutine to completion on one private event loop (the client's connections belong
    to it). Lets the ``Client`` tests run against ``AsyncClient`` unchanged."""

    def __init__(self, client: Any) -> None:
        import asyncio

        self.client = client
        self.loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        return lambda *a, **kw: self.loop.run_until_complete(method(*a, **kw))

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.client.close())
            self.loop.close()


def write_job_field(r: Any, key: str, name: str, value: str | bytes | None) -> None:
    """Write one field of a stored job's hash as a hand would, where the scripts read it:
    one of its small fields (``records.JOB_ST``) inside ``st`` (``None``: emptied, absent),
    any other as a field of its own (``None``: deleted)."""
    from scheduler.stores.redis.protocol.records import JOB_ST

    packed = r.hget(key, "st")
    if name not in JOB_ST or packed is None:
        if value is None:
            r.hdel(key, name)
        else:
            r.hset(key, name, value)
        return
    if isinstance(packed, str):  # a client that decodes its replies
        packed = packed.encode()
    values = packed.split(b",")
    put = value.encode() if isinstance(value, str) else value
    values[JOB_ST.index(name)] = b"" if put is None else put
    r.hset(key, "st", b",".join(values))


def read_job_hash(r: Any, key: str) -> dict[str, str]:
    """A stored job's hash as text, its small fields as fields of their own
    (``records.job_hash``): what the scripts read."""
    from scheduler.stores.redis.protocol.records import job_hash

    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in job_hash(r.hgetall(key)).items()
    }


def read_job_field(r: Any, key: str, name: str) -> Any:
    """One field of a stored job's hash as the scripts read it (``read_job_hash``; the
    client's type: ``bytes`` or ``str``), None if absent."""
    from scheduler.stores.redis.protocol.records import job_hash

    h = job_hash(r.hgetall(key))
    return h.get(name, h.get(name.encode()))
