"""The HTTP helper: the invocation id as ``Idempotency-Key`` (and the fence) against a local
server that records what it got and implements the receiver's side of the contract
(docs/effects.md): the first response per key, replayed; a lower fence refused."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest

from scheduler import JobScheduler
from workers.effects import Fence
from workers.effects.http import FENCE_HEADER, KEY_HEADER, idempotency_headers

WAIT = 10.0  # a bound, never a synchronisation


class Receiver(http.server.ThreadingHTTPServer):
    """Records every request's headers; acts once per Idempotency-Key (an "order" made),
    answers a repeat with the first response, and refuses a fence below the highest seen
    for the key (409)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.seen: list[dict[str, str]] = []
        self.first: dict[str, tuple[int, bytes]] = {}
        self.fences: dict[str, int] = {}
        self.orders: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/orders"

    def handle_order(self, headers: dict[str, str]) -> tuple[int, bytes]:
        key, fence = headers.get(KEY_HEADER), int(headers.get(FENCE_HEADER, "0"))
        with self.lock:
            self.seen.append(headers)
            if key is None:
                return 400, b'{"error": "no Idempotency-Key"}'
            if fence < self.fences.get(key, 0):
                return 409, b'{"error": "stale fence"}'
            self.fences[key] = fence
            if key not in self.first:
                self.orders.append(key)
                body = json.dumps({"order": len(self.orders), "fence": fence}).encode()
                self.first[key] = (201, body)
            return self.first[key]


class Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status, body = self.server.handle_order(dict(self.headers.items()))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=WAIT) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_job_sends_its_invocation_id_and_fence(receiver: Receiver) -> None:
    got: list[tuple[int, dict[str, Any]]] = []
    done = threading.Event()

    def job() -> None:
        got.append(post(receiver.url, idempotency_headers()))
        done.set()

    with JobScheduler(num_workers=1) as s:
        job_id = s.schedule(job, 0)
        assert done.wait(WAIT)
    [headers] = receiver.seen
    job_part, _, sched = headers[KEY_HEADER].partition("@")
    assert job_part == str(job_id) and sched.isdigit()
    assert int(headers[FENCE_HEADER]) >= 1
    assert got == [(201, {"order": 1, "fence": int(headers[FENCE_HEADER])})]


def test_a_rerun_gets_the_first_response_and_a_stale_owner_is_refused(receiver) -> None:
    first, rerun = Fence("charge", 1_767_225_600_000, 7), Fence("charge", 1_767_225_600_000, 9)
    assert post(receiver.url, idempotency_headers(first)) == (201, {"order": 1, "fence": 7})
    assert post(receiver.url, idempotency_headers(rerun)) == (201, {"order": 1, "fence": 7})
    assert post(receiver.url, idempotency_headers(first))[0] == 409  # woke after the re-run
    assert receiver.orders == ["charge@1767225600000"]  # the effect exists once
    other = Fence("charge", 1_767_225_660_000, 10)  # the next occurrence is a new key
    assert post(receiver.url, idempotency_headers(other))[1]["order"] == 2


def test_any_job_id_makes_a_valid_header_that_reads_back() -> None:
    odd = Fence('rapport été "%" \\ x', 5, 1)
    key = idempotency_headers(odd)[KEY_HEADER]
    assert key.isascii() and " " not in key and '"' not in key
    assert unquote(key) == odd.invocation_id
    assert idempotency_headers(odd, structured=True)[KEY_HEADER] == f'"{key}"'
    assert idempotency_headers(Fence("report", 1, 3), fence=False) == {KEY_HEADER: "report@1"}


def test_outside_a_job_it_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match=r"^idempotency_headers\(\) needs the invocation"):
        idempotency_headers()


def test_a_malformed_invocation_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^an invocation's fence must be an int"):
        idempotency_headers(Fence("a", 1, "3"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^an invocation's fence must be >= 0"):
        idempotency_headers(Fence("a", 1, -1))
