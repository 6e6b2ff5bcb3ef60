"""The replica's HTTP endpoint (``duetime run --metrics-port``): ``/metrics`` for
Prometheus, ``/healthz`` (the process is alive: always 200) and ``/readyz`` (200 when the
replica's last claim round reached the store recently, else 503 with the reason).

Stdlib ``http.server`` on a daemon thread, one thread per request; nothing it serves
touches the store except the namespace-wide gauges of ``/metrics`` (on the metrics
leader only, see ``scheduler.metrics``). It binds ``127.0.0.1`` unless told otherwise:
the figures are not secret, but nothing outside the host needs them by default.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("duetime.endpoint")


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


Ready = Callable[[], tuple[bool, str]]


class Endpoint:
    """Serves ``registry`` (a prometheus-client registry; None: no /metrics) and the
    health checks on ``host:port`` (port 0: any free port, see ``port``)."""

    def __init__(
        self, host: str, port: int, *, registry: Any = None, ready: Ready | None = None
    ) -> None:
        self._registry = registry
        self._ready = ready
        server = _Server6 if ":" in host else ThreadingHTTPServer  # "::": IPv6
        self._server = server((host, port), self._handler())  # binds: OSError
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port`` as bound (the port chosen when 0 was asked; IPv6 in [])."""
        host = str(self._server.server_address[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self) -> Endpoint:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="duetime-endpoint", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                endpoint._get(self)

            def do_HEAD(self) -> None:  # noqa: N802 - a probe that asks for the status only
                endpoint._get(self, head=True)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("%s " + format, self.address_string(), *args)

        return Handler

    def _get(self, req: BaseHTTPRequestHandler, head: bool = False) -> None:
        req.head_only = head  # type: ignore[attr-defined]  # read by _reply
        path = req.path.split("?", 1)[0]
        if path == "/healthz":
            self._reply(req, 200, b"ok\n")
        elif path == "/readyz":
            ok, why = (True, "no readiness check") if self._ready is None else self._ready()
            self._reply(req, 200 if ok else 503, f"{'ready' if ok else 'not ready'}: {why}\n")
        elif path in ("/metrics", "/") and self._registry is not None:
            from prometheus_client.exposition import choose_encoder

            encoder, content_type = choose_encoder(req.headers.get("Accept", ""))
            try:
                body = encoder(self._registry)
            except Exception as exc:  # a collector failed: say so, keep serving
                log.exception("rendering /metrics failed")
                self._reply(req, 500, f"rendering the metrics failed: {exc}\n")
                return
            self._reply(req, 200, body, content_type)
        else:
            self._reply(req, 404, b"not found: try /metrics, /healthz or /readyz\n")

    @staticmethod
    def _reply(
        req: BaseHTTPRequestHandler,
        status: int,
        body: bytes | str,
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        req.send_response(status)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        if not getattr(req, "head_only", False):
            req.wfile.write(data)
