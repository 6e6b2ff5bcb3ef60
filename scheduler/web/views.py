"""The console's routes: each read page as HTML (``/ns/<ns>/...``) and as JSON
(``/api/ns/<ns>/...``) from the same data (data.py), the login form, and the errors as
pages. Actions are in actions.py (which uses ``context`` and ``store_of`` from here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.model import EVENT_KINDS
from scheduler.web import data

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute
    from starlette.templating import Jinja2Templates

    from scheduler.stores.redis import RedisStore, ShardedStore

    AnyStore = RedisStore | ShardedStore  # a namespace's store, the console's way in
    from scheduler.web.console import Console

PAGES = ("overview", "jobs", "job", "running", "failed", "recurring", "events", "limits")


class NotFound(Exception):
    """A namespace or job this console does not know: a 404 page that says which."""


class TooLarge(ValueError):
    """A POST's body past its limit: a 413 page."""


def store_of(console: Console, request: Request) -> tuple[str, AnyStore]:
    ns = request.path_params["ns"]
    if ns not in console.stores:
        raise NotFound(
            f"namespace {ns!r} is not served by this console (it serves: "
            f"{', '.join(console.stores)}; add --namespace {ns})"
        )
    return ns, console.stores[ns]


def context(console: Console, request: Request, ns: str, page: str) -> dict[str, Any]:
    """What every page's template needs besides its data."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    cookies = dict(request.cookies)
    actor, why = console.auth.actor(headers, cookies)
    flash = request.query_params.get("flash", "")
    if flash and not _same(console.flash_sig(flash), request.query_params.get("sig", "")):
        flash = ""
    return {
        "ns": ns,
        "page": page,
        "namespaces": list(console.stores),
        "url": console.url,
        "actor": actor,
        "why_readonly": why,
        "can_login": console.auth.can_login and actor is None,
        "csrf": console.auth.csrf(headers, cookies),
        "redact": console.redact,
        "flash": flash,
        "path": raw_path(request) + (("?" + request.url.query) if request.url.query else ""),
        "api_path": _api_path(request, ns, page),
    }


def _api_path(request: Request, ns: str, page: str) -> str:
    """The JSON endpoint behind the page ("" for pages without one)."""
    from urllib.parse import quote

    if page not in PAGES:
        return ""
    if page == "overview":
        return f"/api/ns/{quote(ns)}/overview"
    query = "&".join(
        f"{quote(k)}={quote(v)}" for k, v in request.query_params.multi_items() if k not in _UI
    )
    return "/api" + raw_path(request) + ("?" + query if query else "")


def raw_path(request: Request) -> str:
    """The path as the browser sent it, still percent-encoded: ``request.url.path`` is
    decoded, so a job id holding a literal ``%2F`` linked back to job ``a/b``."""
    from urllib.parse import quote

    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(request.url.path)


_UI = ("flash", "sig")  # query parameters of the page, not of its data


def _same(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())


def routes(console: Console, templates: Jinja2Templates) -> list[BaseRoute]:
    """Every route of the console."""
    from starlette.responses import RedirectResponse
    from starlette.routing import Route

    def reader(page: str, build: Callable[[Request, str, AnyStore], dict[str, Any]]) -> Any:
        def html(request: Request) -> Response:
            ns, store = store_of(console, request)
            ctx = context(console, request, ns, page)
            return templates.TemplateResponse(
                request, f"{page}.html", {**ctx, "data": build(request, ns, store)}
            )

        def api(request: Request) -> Response:
            from starlette.responses import JSONResponse

            ns, store = store_of(console, request)
            return JSONResponse(build(request, ns, store))

        return html, api

    def home(request: Request) -> Response:
        first = next(iter(console.stores))
        return RedirectResponse(f"/ns/{first}/", status_code=302)

    out: list[BaseRoute] = [Route("/", home)]
    for page, path in (
        ("overview", ""),
        ("jobs", "jobs"),
        ("job", "job/{job_id:path}"),
        ("running", "running"),
        ("failed", "failed"),
        ("recurring", "recurring"),
        ("events", "events"),
        ("limits", "limits"),
    ):
        html, api = reader(page, _builders(console)[page])
        out.append(Route(f"/ns/{{ns}}/{path}", html, name=page))
        out.append(Route(f"/api/ns/{{ns}}/{path or 'overview'}", api, name=f"api_{page}"))
        if not path:  # /api + the overview's own path, as for every page
            out.append(Route("/api/ns/{ns}/", api, name="api_overview_path"))
    return out


def api_fallback() -> list[BaseRoute]:
    """Last of all routes: an unknown /api/ path answers JSON, as every endpoint does."""
    from starlette.routing import Route

    def unknown(request: Request) -> Response:
        raise NotFound(f"no such endpoint: {request.url.path} (a page's JSON is /api + its path)")

    return [Route("/api/{rest:path}", unknown, methods=["GET", "POST"])]


def _builders(console: Console) -> dict[str, Callable[[Request, str, AnyStore], dict[str, Any]]]:
    redact = console.redact

    def arg(request: Request, name: str) -> str | None:
        return request.query_params.get(name) or None

    def jobs(request: Request, ns: str, store: AnyStore) -> dict[str, Any]:
        return data.jobs(
            store,
            redact,
            state=arg(request, "state") or "live",
            task=arg(request, "task"),
            lane=arg(request, "lane"),
            prefix=arg(request, "prefix"),
            cursor=arg(request, "cursor"),
        )

    def job(request: Request, ns: str, store: AnyStore) -> dict[str, Any]:
        job_id = request.path_params["job_id"]
        everything = request.query_params.get("scan") == "all"
        found = data.job(store, job_id, redact, None if everything else data.EVENT_SCAN)
        if found is None:
            raise NotFound(
                f"no job with id {job_id!r} in namespace {ns!r} (finished jobs are kept for "
                "their result_ttl, a day by default)"
            )
        return found

    def events(request: Request, ns: str, store: AnyStore) -> dict[str, Any]:
        kinds = frozenset(k for k in request.query_params.getlist("kind") if k) or None
        if kinds and not kinds <= set(EVENT_KINDS):
            raise ValueError(
                f"unknown event kind(s) {sorted(kinds - set(EVENT_KINDS))}: one of "
                + ", ".join(EVENT_KINDS)
            )
        return data.events(store, kinds, redact)

    return {
        "overview": lambda r, ns, s: data.overview(ns, s, console.charts),
        "jobs": jobs,
        "job": job,
        "running": lambda r, ns, s: data.running(s),
        "failed": lambda r, ns, s: data.failed(s, redact, arg(r, "cursor")),
        "recurring": lambda r, ns, s: data.recurring(s, redact, arg(r, "cursor")),
        "events": events,
        "limits": lambda r, ns, s: data.limits(s),
    }


def handlers(console: Console, templates: Jinja2Templates) -> dict[Any, Any]:
    """Errors as one-line pages (or JSON under /api/): 404 unknown, 400 bad input, 503
    Redis unreachable or refusing (the message names the user and the command)."""

    def answer(request: Request, status: int, message: str) -> Response:
        from starlette.responses import JSONResponse

        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        ns = request.path_params.get("ns") or next(iter(console.stores))
        ctx = context(console, request, ns, "error")
        return templates.TemplateResponse(
            request, "error.html", {**ctx, "status": status, "message": message}, status
        )

    def not_found(request: Request, exc: Exception) -> Response:
        return answer(request, 404, str(exc))

    def bad(request: Request, exc: Exception) -> Response:
        return answer(request, 413 if isinstance(exc, TooLarge) else 400, str(exc))

    def unavailable(request: Request, exc: Exception) -> Response:
        return answer(request, 503, redis_message(console, exc))

    import redis

    from scheduler.errors import DuetimeError

    return {
        NotFound: not_found,
        ValueError: bad,
        redis.RedisError: unavailable,
        DuetimeError: unavailable,
        ConnectionError: unavailable,
        TimeoutError: unavailable,
    }


def redis_message(console: Console, exc: BaseException) -> str:
    """One line that says what went wrong with Redis and what to do."""
    cause = exc.__cause__ or exc
    text = str(cause).strip() or type(cause).__name__
    upper = text.upper()
    if "NOPERM" in upper or "NO PERMISSIONS" in upper:
        return (
            f"the Redis user of {console.url} may not do this ({text}): grant it in the "
            "user's ACL (deploy/users.acl lists what each role needs)"
        )
    return f"Redis at {console.url} failed: {text}; is it running, and is the URL right?"
