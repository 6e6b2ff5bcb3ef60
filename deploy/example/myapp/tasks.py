"""Tasks of the example app. Every replica imports this module (``duetime run --import
myapp.tasks``) so that the names below are registered; producers need only the names."""

from __future__ import annotations

import logging

from scheduler import current_invocation, task

log = logging.getLogger("myapp")


@task("myapp.hello")
def hello(name: str = "world") -> str:
    inv = current_invocation()
    log.info(
        "hello, %s (job %s, scheduled at %d ms, attempt %d, fence %d)",
        name,
        inv.job_id,
        inv.scheduled_ms,
        inv.attempt,
        inv.fence,
    )
    return f"hello, {name}"


@task("myapp.report")
async def report(customer_id: int) -> dict[str, int]:
    """The FastAPI recipe's job (deploy/example/recipes/fastapi_app.py): an ``async def``
    task runs on its replica's event loop."""
    log.info("report for customer %d (job %s)", customer_id, current_invocation().job_id)
    return {"customer_id": customer_id}
