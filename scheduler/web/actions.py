"""The console's actions: retry, delete (one, or several ticked), retry every failed job,
pause, resume, trigger now, backfill a range, cancel, and stop (cancel, and ask the
running invocations to stop); and the login form.

Each is a POST (``/ns/<ns>/act/<action>`` from the pages, ``/api/ns/<ns>/act/<action>``
for scripts with ``Authorization: Bearer <token>``), refused (403) unless auth.py names
who acts; a form POST must carry the page's CSRF token. Each action goes through the
``Client`` of the namespace (the same calls as the CLI's) and is recorded as an
``operator`` event naming who did it. A page's POST ends in a redirect back to the page
with a signed one-line message (no re-POST on reload).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlencode

from scheduler.client import Client
from scheduler.errors import JobNotFoundError
from scheduler.stores.redis import redo
from scheduler.web.auth import SESSION_COOKIE, SESSION_TTL

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute
    from starlette.templating import Jinja2Templates

    from scheduler.web.console import Console

log = logging.getLogger("duetime.web")
MAX_FORM = 1 << 20  # bytes of an action's form (a page of 50 ticked ids is a few KB)
MAX_LOGIN_FORM = 16 << 10
CSRF_REFUSAL = "refused: the form's CSRF token is missing or stale; reload the page and retry"
ACTIONS = (
    "retry",
    "delete",
    "pause",
    "resume",
    "trigger",
    "backfill",
    "cancel",
    "stop",
    "retry_failed",
)


def _one(client: Client, action: str, job_id: str, form: dict[str, list[str]]) -> str:
    """Do ``action`` to ``job_id``; what happened, in a few words."""
    if action == "retry":
        return f"queued {client.retry(job_id)} run(s)"
    if action == "delete":
        if not client.delete(job_id):
            raise JobNotFoundError(job_id)
        return "deleted"
    if action == "backfill":
        from scheduler.timeinput import parse_instant

        start, end = (parse_instant(form.get(k, [""])[0].strip(), k) for k in ("start", "end"))
        return f"queued {client.backfill(job_id, start, end)} run(s)"
    if action in ("cancel", "stop"):
        return _cancel(client, job_id, interrupt=action == "stop")
    done = {"pause": client.pause, "resume": client.resume, "trigger": client.trigger}[action]
    if done(job_id):
        return "done"
    state = client.get(job_id).state  # JobNotFoundError when unknown: refused, not recorded
    return f"no effect (the job is {state})"


def _cancel(client: Client, job_id: str, *, interrupt: bool) -> str:
    """Cancel ``job_id``; with ``interrupt``, also ask its running invocations to stop (at
    their replicas' next lease renewal)."""
    info = client.get(job_id)  # JobNotFoundError when unknown
    prevented = client.cancel(job_id, interrupt=interrupt)
    said = "cancelled" if prevented else "no run to come"
    running = len(info.running)
    if running and interrupt:
        said += f"; asked {running} running invocation(s) to stop"
    elif running:
        said += f"; {running} running invocation(s) may finish (stop asks them to stop)"
    elif not prevented:
        said = f"no effect (the job is {info.state})"
    return said


def act(
    console: Console, ns: str, action: str, who: str, form: dict[str, list[str]]
) -> tuple[str, bool]:
    """Do one action for ``who``: a one-line summary, and whether it was refused for every
    job it named. Errors of one job are reported in the summary, the others still run."""
    store = console.stores[ns]
    client = Client(store)
    if action == "retry_failed":
        done = client.retry_failed(form.get("task", [""])[0] or None)
        for job_id, n in done.items():
            redo.note(store, job_id, "retry (all failed)", who, f"queued {n} run(s)")
        return f"retry all failed: {sum(done.values())} run(s) of {len(done)} job(s) queued", False
    ids = [i for i in form.get("job", []) if i]
    if not ids:
        raise ValueError("no job selected: tick one or more jobs first")
    results, refused = [], 0
    for job_id in ids:
        try:
            what = _one(client, action, job_id, form)
        except (ValueError, LookupError) as exc:  # JobNotFoundError is a LookupError
            what, refused = f"refused: {exc}", refused + 1
        else:
            redo.note(store, job_id, action, who, what)
        results.append(f"{job_id}: {what}")
    log.info("web: %s by %s in %s: %s", action, who, ns, "; ".join(results))
    return f"{action} — " + "; ".join(results), refused == len(ids)


def routes(console: Console, templates: Jinja2Templates) -> list[BaseRoute]:
    from starlette.responses import JSONResponse, RedirectResponse
    from starlette.routing import Route

    from scheduler.web.views import TooLarge, context, store_of

    async def form_of(request: Request, limit: int) -> dict[str, list[str]]:
        """The form, read up to ``limit`` bytes (a ValueError past it: a 400 page)."""
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"the form is larger than {limit:,} bytes: nothing was done")
            chunks.append(chunk)
        body = b"".join(chunks).decode("utf-8", "replace")
        return parse_qs(body, keep_blank_values=True) if body else {}

    async def post(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        ns, _ = store_of(console, request)
        action = request.path_params["action"]
        api = request.url.path.startswith("/api/")
        headers = {k.lower(): v for k, v in request.headers.items()}
        cookies = dict(request.cookies)
        who, how = console.auth.actor(headers, cookies)
        status, refused = _refusal(console, action, who, how)
        form = {} if refused else await form_of(request, MAX_FORM)
        csrf = form.get("csrf", [""])[0]
        if not refused and how != "bearer" and not console.auth.csrf_ok(csrf, headers, cookies):
            status, refused = 403, CSRF_REFUSAL
        if refused:
            if api:
                return JSONResponse({"error": refused}, status_code=status)
            ctx = context(console, request, ns, "error")
            return templates.TemplateResponse(
                request, "error.html", {**ctx, "status": status, "message": refused}, status
            )
        summary, none_done = await run_in_threadpool(
            act, console, ns, action, f"{who} ({how})", form
        )
        if api:
            return JSONResponse({"done": summary}, status_code=422 if none_done else 200)
        back = form.get("next", [""])[0]
        back = back if back.startswith("/") and not back.startswith("//") else f"/ns/{ns}/"
        sep = "&" if "?" in back else "?"
        query = urlencode({"flash": summary, "sig": console.flash_sig(summary)})
        return RedirectResponse(f"{back}{sep}{query}", status_code=303)

    def login_page(request: Request) -> Response:
        ns = next(iter(console.stores))
        ctx = context(console, request, ns, "login")
        return templates.TemplateResponse(request, "login.html", {**ctx, "failed": False})

    async def login(request: Request) -> Response:
        form = await form_of(request, MAX_LOGIN_FORM)
        sid = console.auth.login(form.get("token", [""])[0])
        if sid is None:
            ns = next(iter(console.stores))
            ctx = context(console, request, ns, "login")
            return templates.TemplateResponse(request, "login.html", {**ctx, "failed": True}, 403)
        reply = RedirectResponse(f"/ns/{next(iter(console.stores))}/", status_code=303)
        reply.set_cookie(
            SESSION_COOKIE, sid, max_age=int(SESSION_TTL), httponly=True, samesite="strict"
        )
        return reply

    async def logout(request: Request) -> Response:
        console.auth.logout(request.cookies.get(SESSION_COOKIE))
        reply = RedirectResponse("/login", status_code=303)
        reply.delete_cookie(SESSION_COOKIE)
        return reply

    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/ns/{ns}/act/{action}", post, methods=["POST"]),
        Route("/api/ns/{ns}/act/{action}", post, methods=["POST"]),
    ]


def _refusal(console: Console, action: str, who: str | None, how: str) -> tuple[int, str]:
    """(status, why this POST is refused), or (200, "") when it may go on: decided before
    its body is read."""
    if action not in ACTIONS:
        return 404, f"unknown action {action!r} (one of {', '.join(ACTIONS)})"
    if who is None:
        return 403, f"refused: {how}"
    return 200, ""
