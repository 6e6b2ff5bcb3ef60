"""Who may act in the web console, and proof that a POST came from its own page.

Read-only by default: every action is refused unless the console was started with
actions enabled AND one way of knowing who acts:

* a token (``--token-file`` or ``$DUETIME_WEB_TOKEN``), entered once in the login form
  (``POST /login``, compared with ``hmac.compare_digest``) which sets a session cookie
  (random id, HttpOnly, SameSite=Strict, kept in this process's memory for
  ``SESSION_TTL``), or sent by scripts as ``Authorization: Bearer <token>``; the actor is
  the token's label (``--token-label``). The token never appears in a URL or a log line;
* a trusted proxy header (``--trusted-proxy-header X-Forwarded-User``): the user's own
  authenticating proxy names the user; the console must then only be reachable through
  that proxy (bind 127.0.0.1, the default).

Every form POST carries a CSRF token: an HMAC (per-process secret) of the session id or
the proxy user, checked in constant time. A bearer-token request needs none (it has no
ambient credential a foreign page could ride on).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

SESSION_COOKIE = "duetime_session"
SESSION_TTL = 12 * 3600.0  # seconds a login lasts


@dataclass
class Auth:
    """The console's policy: ``actions`` enabled at all; ``token``/``label`` for logins;
    ``proxy_header`` (lower-case) naming the user when a trusted proxy authenticates."""

    actions: bool = False
    token: str | None = None
    label: str = "operator"
    proxy_header: str | None = None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _sessions: dict[str, tuple[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.proxy_header:
            self.proxy_header = self.proxy_header.lower()

    @property
    def can_login(self) -> bool:
        return self.actions and bool(self.token)

    def check_token(self, given: str) -> bool:
        """True iff ``given`` is the token (constant time; False when there is none)."""
        if not self.token:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def login(self, given: str) -> str | None:
        """A new session id if ``given`` is the token, else None."""
        if not self.can_login or not self.check_token(given):
            return None
        sid = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            for old in [s for s, (_, t) in self._sessions.items() if t < now]:
                del self._sessions[old]
            self._sessions[sid] = (self.label, now + SESSION_TTL)
        return sid

    def logout(self, sid: str | None) -> None:
        with self._lock:
            self._sessions.pop(sid or "", None)

    def actor(self, headers: dict[str, str], cookies: dict[str, str]) -> tuple[str | None, str]:
        """(who acts, how: ``session`` | ``bearer`` | ``proxy``), or (None, why not)."""
        if not self.actions:
            return None, "read-only: start duetime web with --actions (and a token)"
        if self.proxy_header:
            user = headers.get(self.proxy_header, "").strip()
            if user:
                return user, "proxy"
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer ") and self.check_token(bearer[7:].strip()):
            return self.label, "bearer"
        sid = cookies.get(SESSION_COOKIE)
        if sid:
            with self._lock:
                found = self._sessions.get(sid)
            if found and found[1] > time.monotonic():
                return found[0], "session"
        if not self.token and not self.proxy_header:
            return None, "no token is configured: give --token-file or $DUETIME_WEB_TOKEN"
        if not self.token:  # proxy-only: there is no token to sign in with
            return None, (
                f"your proxy did not name a user (no {self.proxy_header} header): reach the "
                "console through the authenticating proxy"
            )
        if bearer.lower().startswith("bearer "):  # said without the token given
            return None, (
                "wrong token: the Authorization: Bearer token is not the console's "
                "(--token-file or $DUETIME_WEB_TOKEN)"
            )
        return None, "not logged in: sign in with the console's token"

    def csrf(self, headers: dict[str, str], cookies: dict[str, str]) -> str:
        """The CSRF token the page's forms carry ("" when nobody can act)."""
        user, how = self.actor(headers, cookies)
        if user is None:
            return ""
        basis = cookies.get(SESSION_COOKIE, "") if how == "session" else f"proxy:{user}"
        return hmac.new(self.secret, basis.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, given: str, headers: dict[str, str], cookies: dict[str, str]) -> bool:
        """True iff the form's ``given`` token is this session's (constant time)."""
        expected = self.csrf(headers, cookies)
        return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())
