"""Issue 14's recipes, run against a real redis-server: a FastAPI app that enqueues with
an ``AsyncClient`` opened in its lifespan, a plain asyncio program that embeds a replica
with ``Scheduler.serve()`` (cancelling it is a clean shutdown), and a Django site
whose settings name the namespace (views enqueue; a management command runs a replica)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import pathlib
import sys
import types

import pytest

from scheduler import Client, RedisStore, Scheduler, SchedulerClosedError

pytestmark = pytest.mark.redis

ROOT = pathlib.Path(__file__).resolve().parents[2]
RECIPES = ROOT / "deploy" / "example" / "recipes"


def load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"duetime_recipe_{name}", RECIPES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_fastapi_recipe_enqueues_through_its_lifespan_client(redis_url, redis_ns, monkeypatch):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    monkeypatch.setenv("DUETIME_REDIS_URL", redis_url)
    monkeypatch.setenv("DUETIME_NAMESPACE", redis_ns)
    app = load("fastapi_app").app
    with TestClient(app) as http:
        r = http.post("/reports/7", params={"delay": "90s"})
        assert r.status_code == 200, r.text
        job_id = r.json()["job_id"]
        for bad in ("-5", "banana"):  # were a 500 with a traceback
            r = http.post("/reports/8", params={"delay": bad})
            assert r.status_code == 422 and "delay" in r.json()["detail"], r.text
    import subprocess

    check = (
        "import myapp.tasks; from scheduler import tasks; print(tasks.registered('myapp.report'))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(RECIPES.parent)])}
    done = subprocess.run(  # what the replicas --import, in a process of its own
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "function report" in done.stdout, done.stderr
    with Client(RedisStore(redis_url, redis_ns)) as c:
        info = c.get(job_id)
    assert (info.task, info.args, info.state) == ("myapp.report", '{"customer_id":7}', "scheduled")


def test_the_asyncio_recipe_runs_an_async_job_and_stops_cleanly(
    redis_url, redis_ns, monkeypatch, capsys
):
    monkeypatch.setenv("DUETIME_REDIS_URL", redis_url)
    monkeypatch.setenv("DUETIME_NAMESPACE", redis_ns)
    recipe = load("asyncio_embed")
    asyncio.run(recipe.main(seconds=1.5))
    out = capsys.readouterr().out
    assert "state='succeeded'" in out and "last_result=19" in out, out


def test_cancelling_serve_is_a_clean_shutdown(clock):
    ran: list[str] = []

    async def main() -> None:
        engine = Scheduler(1, clock=clock)
        serving = asyncio.create_task(engine.serve(shutdown_timeout=5))
        await asyncio.sleep(0)
        engine.after(lambda: ran.append("x"), 0)
        await asyncio.to_thread(engine.wait_idle)
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        with pytest.raises(SchedulerClosedError):
            engine.after(lambda: None, 0)

    asyncio.run(main())
    assert ran == ["x"]


def test_the_django_recipe_enqueues_from_views_and_its_command_runs_them(
    redis_url, redis_ns, monkeypatch
):
    """Settings-driven namespace: the views (sync with a shared Client, async with an
    AsyncClient per request) and the ``duetime_run`` management command read DUETIME."""
    pytest.importorskip("django")
    import os
    import signal
    import subprocess
    import time

    from scheduler.embedded import spawn_tied

    monkeypatch.setenv("DUETIME_REDIS_URL", redis_url)
    monkeypatch.setenv("DUETIME_NAMESPACE", redis_ns)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "django_site.settings")
    monkeypatch.syspath_prepend(str(RECIPES))
    import django
    from django.test import AsyncClient as DjangoAsyncClient
    from django.test import Client as DjangoClient

    django.setup()
    r = DjangoClient().get("/welcome/7")
    assert r.status_code == 200, r.content
    welcome = r.json()["job_id"]

    async def digest() -> str:
        bad = await DjangoAsyncClient().get("/digest/9", {"delay": "xx"})  # was a 500
        assert bad.status_code == 400 and "not a duration" in bad.json()["error"]
        resp = await DjangoAsyncClient().get("/digest/8", {"delay": "0.2"})
        assert resp.status_code == 200, resp.content
        return str(resp.json()["job_id"])

    digest_id = asyncio.run(digest())
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(RECIPES)])}
    replica = spawn_tied(
        [sys.executable, "-m", "django", "duetime_run", "--workers", "2"],
        cwd=RECIPES,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with Client(redis_url, namespace=redis_ns) as c:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and replica.poll() is None:
                states = {c.get(j).state for j in (welcome, digest_id)}
                if states == {"succeeded"}:
                    break
                time.sleep(0.1)  # polling a real subprocess, not a sync point
            assert c.get(welcome).last_result == "welcome mail for user 7"
            assert c.get(digest_id).last_result == f"digest {digest_id} for user 8"
    finally:
        replica.send_signal(signal.SIGTERM)
        out, _ = replica.communicate(timeout=30)
    assert replica.returncode == 0, out
