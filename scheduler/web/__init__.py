"""``duetime web``: a web console over shared namespaces (the ``web`` extra: Starlette,
uvicorn, Jinja2). Read pages with a JSON endpoint behind each, and, when enabled with a
token or behind a trusted proxy, the operator's actions (docs/web.md).

app.py (the ASGI app and what it serves), views.py (read pages and errors), actions.py
(POSTs and the login), auth.py (who may act, CSRF), data.py (each page's data, from the
store's queries), occurrences.py (a job's next runs with their daylight-saving decisions),
templates/ and static/ (shipped in the wheel; uPlot vendored, nothing from the internet).
"""

from scheduler.web.app import create_app
from scheduler.web.console import Console

__all__ = ["Console", "create_app"]
