"""Views that enqueue. A sync view shares one ``Client`` (thread-safe; made on first use);
an async view opens an ``AsyncClient`` per request (Django may run each async request on
a loop of its own, and a redis.asyncio pool belongs to one loop)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from scheduler import AsyncClient, Client

_client: Client | None = None


def client() -> Client:
    global _client
    if _client is None:
        cfg = settings.DUETIME
        _client = Client(cfg["REDIS_URL"], namespace=cfg["NAMESPACE"])
    return _client


def welcome(request: HttpRequest, user_id: int) -> JsonResponse:
    # The job id makes repeated requests one job while it waits or runs. Once it has run,
    # the same id enqueues a new job (a finished job is kept a day for inspection, not as
    # a guard), so "once per user, ever" belongs to the site's own data (a sent_at field).
    job_id = client().enqueue("site.welcome", kwargs={"user_id": user_id}, job_id=f"w{user_id}")
    return JsonResponse({"job_id": job_id})


async def digest(request: HttpRequest, user_id: int) -> JsonResponse:
    cfg = settings.DUETIME
    async with AsyncClient(cfg["REDIS_URL"], namespace=cfg["NAMESPACE"]) as c:
        try:
            job_id = await c.enqueue(
                "site.digest", kwargs={"user_id": user_id}, delay=request.GET.get("delay", 0)
            )
        except (ValueError, TypeError) as exc:  # a delay that is not one: nothing stored
            return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"job_id": job_id})
