"""Results across processes (docs/results.md): a ``duetime run`` replica process runs the
jobs; this process's ``Client`` and ``AsyncClient`` wait for their results on their
handles (values, failures, a recurring invocation), read a running job's progress, and
``duetime show`` prints it. Handles at rest send Redis nothing."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from scheduler import AsyncClient, Client
from scheduler.cli import main
from scheduler.embedded import spawn_tied
from scheduler.errors import JobFailed, ResultTimeoutError

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

TASKS = """
import time
import scheduler
from scheduler import current_invocation

@scheduler.task("res.add")
def add(a, b):
    return {"sum": a + b}

@scheduler.task("res.boom")
def boom():
    raise KeyError("customer")

@scheduler.task("res.a_set")
def a_set():
    return {1, 2}

@scheduler.task("res.slow")
def slow(steps):
    for i in range(steps):
        current_invocation().progress({"step": i, "of": steps})
        time.sleep(0.1)
    return steps

@scheduler.task("res.tick")
def tick():
    return current_invocation().scheduled_ms
"""


@pytest.fixture
def replica(redis_url, redis_ns, tmp_path):
    (tmp_path / "res_tasks.py").write_text(TASKS)
    proc = spawn_tied(
        [sys.executable, "-m", "scheduler", "run", "--redis", redis_url, "--namespace",
         redis_ns, "--import", "res_tasks", "--workers", "4"],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{ROOT}:{tmp_path}", "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    yield proc
    proc.terminate()
    proc.wait(30)


def test_handles_wait_for_a_replica_processes_outcomes(replica, redis_url, redis_ns):
    with Client(redis_url, namespace=redis_ns) as c:
        h = c.enqueue("res.add", kwargs={"a": 1, "b": 2})
        assert h.result(timeout=60) == {"sum": 3}
        with pytest.raises(JobFailed) as failed:
            c.enqueue("res.boom", retry=None).result(timeout=30)
        assert (failed.value.state, failed.value.error_type) == ("failed", "KeyError")
        assert failed.value.message == "'customer'"
        with pytest.raises(JobFailed, match="ResultNotJSONError: the job returned a set"):
            c.enqueue("res.a_set", retry=None).result(timeout=30)
        slow = c.enqueue("res.slow", kwargs={"steps": 30}, job_id="slow")
        deadline = time.monotonic() + 30
        while slow.progress() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the test's own look, not the handle's way of waiting
        assert slow.progress()["of"] == 30
        cli = CliRunner(env={"DUETIME_REDIS_URL": redis_url, "DUETIME_NAMESPACE": redis_ns})
        out = cli.invoke(main, ["show", "slow"]).output
        assert re.search(r'^progress\s+\{"step": \d+, "of": 30\}  \(invocation slow@\d+', out, re.M)
        shown = json.loads(cli.invoke(main, ["show", "slow", "--json"]).output)["progress"]
        assert shown["value"]["of"] == 30 and shown["scheduled_ms"] > 0
        assert slow.result(timeout=30) == 30
        tick = c.enqueue("res.tick", every=0.5, job_id="tick")
        ran = tick.result(timeout=30)  # its next run, whichever it is
        assert tick.at(ran / 1000).result(timeout=1) == ran  # that one, kept for its handles
        assert c.handle("tick", f"tick@{ran}").result(timeout=1) == ran
        c.cancel("tick")


def test_async_handles_are_awaited(replica, redis_url, redis_ns):
    async def main_() -> list[int]:
        async with AsyncClient(redis_url, namespace=redis_ns) as c:
            hs = [await c.enqueue("res.add", kwargs={"a": i, "b": 0}) for i in range(50)]
            got = await asyncio.gather(*hs)
            with pytest.raises(JobFailed):
                await (await c.enqueue("res.boom", retry=None)).result(timeout=30)
            return [g["sum"] for g in got]

    assert asyncio.run(main_()) == list(range(50))


def test_waiting_handles_send_nothing_at_rest(redis_url, redis_ns):
    """20 handles wait for jobs due in an hour: after they registered, Redis hears
    nothing from them (pub/sub holds one blocked connection)."""
    with Client(redis_url, namespace=redis_ns) as c:
        hs = [c.enqueue("res.add", kwargs={"a": i, "b": 0}, delay=3600) for i in range(20)]
        errors: list[BaseException] = []

        def wait(h):
            try:
                h.result(timeout=4)
            except ResultTimeoutError as e:
                errors.append(e)

        threads = [threading.Thread(target=wait, args=(h,)) for h in hs]
        for t in threads:
            t.start()
        time.sleep(1.0)  # registered
        r = redis.Redis.from_url(redis_url)
        before = _calls(r)
        time.sleep(2.0)
        after = _calls(r)
        r.close()
        for t in threads:
            t.join()
        assert len(errors) == 20
    assert after - before <= 1, "handles at rest sent commands"  # the first INFO's own


def _calls(r: redis.Redis) -> int:
    return sum(v["calls"] for v in r.info("commandstats").values())
