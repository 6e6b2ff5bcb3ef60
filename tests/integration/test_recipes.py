"""Issue 14's recipes, run against a real redis-server: a FastAPI app that enqueues with
an ``AsyncClient`` opened in its lifespan, and a plain asyncio program that embeds a
replica with ``Scheduler.serve()`` (cancelling it is the SPEC §4.8 shutdown)."""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
import sys
import types

import pytest

from scheduler import Client, RedisStore, Scheduler, SchedulerClosedError

pytestmark = pytest.mark.redis

RECIPES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "example" / "recipes"


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
