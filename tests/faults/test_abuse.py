"""Bad data in Redis and secrets (docs/reliability.md) that the other suites leave
open: a pickle blob where a definition belongs, data naming code to import, and a
password in the Redis URL that must never reach a log line or an error message."""

from __future__ import annotations

import json
import os
import pickle  # noqa: S403  (only to plant a realistic blob; the package never imports it)
import signal
import subprocess
import sys
import threading

import pytest

from scheduler import Client, Scheduler, task
from scheduler.embedded import EmbeddedRedis, spawn_tied
from scheduler.model import After
from scheduler.stores.redis import RedisStore, StoreUnavailableError
from scheduler.stores.redis.reading import fleet
from tests.faults.fleet import ROOT, wait_until
from tests.helpers import spec

pytestmark = pytest.mark.redis


def test_a_pickle_blob_in_a_job_definition_is_quarantined_never_unpickled(
    redis_url, redis_ns, redis_client, clock
):
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("blob", After(0)))
    store.add(spec("good", After(0)))
    redis_client.hset(store.keys.job("blob"), "def", pickle.dumps(os.system))
    with Client(store) as client:  # raw (valid) UTF-8 in a definition still flows
        uni = client.enqueue("tests.abuse.echo", kwargs={"text": "é 😀"}, delay=0)
    text = redis_client.hget(store.keys.job(uni), "def").decode()
    raw = text.replace("\\\\u00e9", "é").replace("\\\\ud83d\\\\ude00", "😀")
    assert raw != text and not raw.isascii()
    redis_client.hset(store.keys.job(uni), "def", raw.encode())
    store.add(spec("surrogate", After(0)))
    redis_client.hset(store.keys.job("surrogate"), "def", b'{"t":"\xed\xa0\x80"}')
    batch = store.claim_due({"default": 10}, 30, "o")
    assert sorted(c.job_id for c in batch.claims) == sorted(["good", uni])
    mine = next(c for c in batch.claims if c.job_id == uni)
    assert json.loads(mine.spec.target.args_json) == {"text": "é 😀"}
    for bad in ("blob", "surrogate"):  # moved aside by claim.lua itself: never claimed
        record = json.loads(redis_client.hget(store.keys.quarantined, bad))
        assert record["reason"] == "malformed job data: field def is not non-empty UTF-8 text"
        assert not redis_client.exists(store.keys.job(bad))
        assert redis_client.hget(store.keys.quarantined_data(bad), "def")  # kept as it was
    store.close()


@task("tests.abuse.echo")
def echo(text: str) -> str:
    return text


ran = threading.Event()


@task("tests.abuse.ok")
def ok() -> None:
    ran.set()


def test_data_cannot_choose_code_to_import_or_run(redis_url, redis_ns, redis_client, monkeypatch):
    """A definition rewritten in Redis to name ``os.system`` names a task no replica has:
    never claimed, imported or run (it waits, visibly, for a replica that serves it); the
    replica keeps running other jobs."""
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    with Client(redis_url, namespace=redis_ns) as client:
        job = client.enqueue("tests.abuse.ok", delay=3600)
        key = f"duetime:{{{redis_ns}}}:job:{job}"
        text = redis_client.hget(key, "def").decode()
        redis_client.hset(
            key,
            "def",
            text.replace('"tests.abuse.ok"', '"os.system"').replace(
                '"{}"', '"{\\"command\\":\\"touch /tmp/duetime-pwned\\"}"'
            ),
        )
        assert b"os.system" in redis_client.hget(key, "def")
        client.trigger(job)
        store = RedisStore(redis_url, redis_ns, lease=5, resync=0.2)
        with Scheduler(1, store=store):
            assert wait_until(lambda: fleet.waiting(store) == {"os.system": 1}, 10)
            client.enqueue("tests.abuse.ok", delay=0)
            assert ran.wait(10), "the replica stopped running other jobs"
        store.close()
        events = [e for e in client.events(100) if e.job_id == job]
        info = client.get(job)
    assert calls == [] and not os.path.exists("/tmp/duetime-pwned")
    assert not any(e.kind == "claimed" for e in events), events
    assert info is not None and (info.attempts, info.failures) == (0, 0)


def test_a_password_in_the_url_never_reaches_logs_or_errors(tmp_path):
    secret = "s3cr3t-Pa55"
    with EmbeddedRedis() as server:
        import redis

        redis.Redis(port=server.port).config_set("requirepass", secret)
        url = f"redis://:{secret}@127.0.0.1:{server.port}/0"
        proc = spawn_tied(
            [
                sys.executable,
                "-m",
                "scheduler",
                "run",
                "--redis",
                url,
                "--namespace",
                "sec",
                "--import",
                "tests.helpers",
                "--log-level",
                "DEBUG",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            r = redis.Redis(port=server.port, password=secret)
            assert wait_until(lambda: r.keys("duetime:{sec}:replica:*"), 20)
            r.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        assert "running namespace" in out, out
        assert secret not in out and ":***@" in out, out
        wrong = f"redis://:wrong-{secret}@127.0.0.1:{server.port}/0"
        bad = subprocess.run(
            [sys.executable, "-m", "scheduler", "ls", "--redis", wrong],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert bad.returncode == 3, bad
        assert secret not in bad.stdout + bad.stderr
        assert "password" in (bad.stdout + bad.stderr).lower(), bad.stderr
    store = RedisStore(url, "sec")  # the server is gone now
    with pytest.raises(StoreUnavailableError) as err:
        store.add(spec("x", After(0)))
    assert secret not in str(err.value) and ":***@" in str(err.value)
    store.close()


def test_a_huge_result_is_not_stored_whole(redis_url, redis_ns, clock):
    """The commit path may write past maxmemory (flags=allow-oom), so what it writes is
    capped: a result over the limit is replaced by a note."""
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("big", After(0)))
    claim = store.claim_due({"default": 1}, 30, "o").claims[0]
    assert store.complete(claim, "x" * 200_000).value == "ok"
    assert "not stored: over the" in store.get("big").last_result
    store.close()
