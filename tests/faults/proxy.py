"""A small TCP proxy between replicas and Redis that injects network faults.

(``tc netem`` is missing on this kernel.) Modes, switchable at any time:

- ``delay(ms, jitter_ms)``: every reply chunk (Redis -> client) waits ms ± jitter first,
  so a round trip takes ms longer (requests are not delayed).
- ``blackhole()`` / ``heal()``: a partition. Nothing is forwarded in either direction, new
  connections are accepted but not connected through; bytes sent meanwhile wait (like TCP
  retransmissions) and flow again on ``heal()``.
- ``reset()`` / ``heal()``: every open connection is closed with a TCP RST, and new ones
  are reset at once until healed.
- ``drop_reply_once(match)``: the next request containing ``match`` (e.g. a script's SHA)
  is forwarded, its reply is swallowed and that connection is reset: the command ran in
  Redis but the client never learns its outcome (a lost reply).

Threads: one acceptor, two pumps per connection. ``close()`` stops everything.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

HOST = "127.0.0.1"


def _rst(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), not FIN: the peer sees 'connection reset'. The
    shutdown comes first: a close() alone does not tear the socket down while another
    thread is blocked in recv() on it (the kernel holds it until that returns), so the
    peer would see nothing and wait for its reply until its socket timeout (5 s)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Link:
    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.server: socket.socket | None = None
        self.drop_next_reply = False
        self.armed: bytes | None = None  # the drop this link's next reply carries
        self.closed = False


class Proxy:
    """Listens on a free loopback port (``url``) and forwards to ``upstream_port``."""

    def __init__(self, upstream_port: int, seed: int = 0) -> None:
        self.upstream = (HOST, upstream_port)
        self._rng = random.Random(seed)
        self._cond = threading.Condition()
        self._blackholed = False
        self._resetting = False
        self._delay = (0.0, 0.0)
        self._drop_match: bytes | None = None
        self._links: set[_Link] = set()
        self._closed = False
        self.connections = self.resets = self.dropped_replies = 0
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    # ---- fault switches ---------------------------------------------------------------

    def delay(self, ms: float, jitter_ms: float = 0.0) -> None:
        with self._cond:
            self._delay = (ms / 1000, jitter_ms / 1000)

    def blackhole(self) -> None:
        with self._cond:
            self._blackholed = True

    def reset(self) -> None:
        with self._cond:
            self._resetting = True
            links = list(self._links)
        for link in links:
            self._kill(link)

    def drop_reply_once(self, match: bytes) -> None:
        with self._cond:
            self._drop_match = match

    def heal(self) -> None:
        """End blackhole, reset and delay; forward what waited."""
        with self._cond:
            self._blackholed = self._resetting = False
            self._delay = (0.0, 0.0)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            links = list(self._links)
        _rst(self._listener)
        for link in links:
            self._kill(link)

    # ---- plumbing -------------------------------------------------------------------------

    def _kill(self, link: _Link) -> None:
        with self._cond:
            if link.armed is not None and self._drop_match is None and not self._closed:
                # it died before the reply it was to drop came back: the drop did not
                # happen, so it is armed again for the next such command (counted when done)
                self._drop_match, link.armed = link.armed, None
            if link.closed:
                return
            link.closed = True
            self._links.discard(link)
            self.resets += 1
        _rst(link.client)
        if link.server is not None:
            _rst(link.server)

    def _gate(self, reply: bool = False) -> bool:
        """Wait while blackholed; then, for a reply, the delay. False once closed."""
        with self._cond:
            while self._blackholed and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            base, jitter = self._delay
        if reply and base > 0:
            time.sleep(max(0.0, base + self._rng.uniform(-jitter, jitter)))
        return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._cond:
                if self._closed:
                    _rst(client)
                    return
                if self._resetting:
                    self.resets += 1
                    _rst(client)
                    continue
                link = _Link(client)
                self._links.add(link)
                self.connections += 1
            threading.Thread(target=self._up, args=(link,), daemon=True).start()

    def _up(self, link: _Link) -> None:
        """Client -> Redis (connects upstream once the gate opens)."""
        try:
            if not self._gate():
                return self._kill(link)
            link.server = socket.create_connection(self.upstream)
            threading.Thread(target=self._down, args=(link,), daemon=True).start()
            while True:
                data = link.client.recv(65536)
                if not data:
                    return self._kill(link)
                with self._cond:
                    if self._drop_match is not None and self._drop_match in data:
                        link.armed, self._drop_match = self._drop_match, None
                        link.drop_next_reply = True
                if not self._gate():
                    return self._kill(link)
                link.server.sendall(data)
        except OSError:
            self._kill(link)

    def _down(self, link: _Link) -> None:
        """Redis -> client."""
        assert link.server is not None
        try:
            while True:
                data = link.server.recv(65536)
                if not data:
                    return self._kill(link)
                if link.drop_next_reply:
                    with self._cond:
                        self.dropped_replies += 1
                        link.armed = None
                    return self._kill(link)
                if not self._gate(reply=True):
                    return self._kill(link)
                link.client.sendall(data)
        except OSError:
            self._kill(link)
