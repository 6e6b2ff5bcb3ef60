"""Recipe: a FastAPI (or Starlette) app that enqueues jobs into a shared duetime namespace.

One ``AsyncClient`` is opened in the app's lifespan and shared by every request; an
endpoint enqueues a job for a registered task (the task runs in the replicas: ``duetime
run --import myapp.tasks``, or an engine embedded with ``Scheduler.serve()``, see
asyncio_embed.py). Run it with ``uvicorn deploy.example.recipes.fastapi_app:app`` and
``DUETIME_REDIS_URL`` set.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request

from scheduler import AsyncClient


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    url = os.environ.get("DUETIME_REDIS_URL", "redis://127.0.0.1:6379/0")
    namespace = os.environ.get("DUETIME_NAMESPACE", "default")
    async with AsyncClient(url, namespace=namespace) as client:
        app.state.duetime = client
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/reports/{customer_id}")
async def schedule_report(customer_id: int, request: Request, delay: str = "1h") -> dict[str, str]:
    """Run ``myapp.report`` (deploy/example/myapp/tasks.py) for the customer after
    ``delay`` (a duration: 90s, 1h30m); a delay that is not one is the client's error."""
    client: AsyncClient = request.app.state.duetime
    try:
        job_id = await client.enqueue(
            "myapp.report", delay=delay, kwargs={"customer_id": customer_id}
        )
    except (ValueError, TypeError) as exc:  # bad input: nothing was stored
        raise HTTPException(status_code=422, detail=str(exc)) from None
    return {"job_id": job_id}
