"""The console's ASGI application: ``create_app(Console(...))`` (Starlette; Jinja2 with
autoescape for every page, so job ids, task names, arguments and errors are escaped
everywhere). ``duetime web`` (scheduler/cli/web.py) serves it with uvicorn.

Every page has a stable deep link and a JSON endpoint behind it: ``/ns/<ns>/<page>`` and
``/api/ns/<ns>/<page>`` (pages: overview at ``/ns/<ns>/``, ``jobs``, ``job/<id>``,
``running``, ``failed``, ``recurring``, ``events``). Actions are POSTs to
``/ns/<ns>/act/<action>`` (views.py; auth.py decides who may).
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from scheduler import timeinput
from scheduler.web.console import Console

if TYPE_CHECKING:
    from starlette.applications import Starlette


HERE = Path(__file__).parent


def utc(t: float | None) -> str:
    if t is None:
        return "-"
    try:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except timeinput.OUT_OF_RANGE:
        return timeinput.beyond(t)


def span(seconds: float | None) -> str:
    from scheduler.cli.render import span as text

    if seconds is None:
        return "-"
    return ("-" if seconds < 0 else "") + text(abs(seconds))


def create_app(console: Console) -> Starlette:
    """The console as an ASGI app (sync views run on Starlette's thread pool)."""
    import jinja2
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.routing import Mount
    from starlette.staticfiles import StaticFiles
    from starlette.templating import Jinja2Templates

    from scheduler.web import actions, views

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True
    )
    templates = Jinja2Templates(env=env)
    env.filters["utc"] = utc
    env.filters["span"] = span
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["tojson_pretty"] = _pretty
    routes = views.routes(console, templates) + actions.routes(console, templates)
    routes += views.api_fallback()
    routes.append(Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"))
    middleware = [Middleware(Hardened)]
    if console.allowed_hosts:  # a page bound to 127.0.0.1 is not one DNS rebinding away
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=console.allowed_hosts))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers=views.handlers(console, templates),
    )
    app.state.console = console
    return app


CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
log = logging.getLogger("duetime.web")


class Hardened:
    """Every answer says: no framing (an action button cannot be clicked through another
    site's page), scripts from this console only, no MIME sniffing, no referrer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def headers(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        try:
            await self.app(scope, receive, headers)
        except Exception:  # a bug: a one-line 500 with the same headers, the traceback logged
            log.exception("web: %s %s failed", scope.get("method"), scope.get("path"))
            if started:
                raise
            body = b"internal error: the console logged it (please report it)"
            await headers(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")],
                }
            )
            await send({"type": "http.response.body", "body": body})


def _pretty(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, sort_keys=True, default=str)
