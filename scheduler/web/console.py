"""What one web console serves (``Console``): its own module, so the app, the views and
the actions all read it without importing one another."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.web.auth import Auth
from scheduler.web.data import Charts

if TYPE_CHECKING:
    from scheduler.stores.redis import RedisStore, ShardedStore

    AnyStore = RedisStore | ShardedStore  # a namespace's store, the console's way in


@dataclass
class Console:
    """What one console serves: the stores of its namespaces (the first is the default),
    the Redis URL as shown (password masked), who may act, and whether arguments are
    redacted."""

    stores: dict[str, AnyStore]
    url: str = ""
    auth: Auth = field(default_factory=Auth)
    redact: bool = False
    charts: Charts = field(default_factory=Charts)
    allowed_hosts: list[str] | None = None  # Host headers answered (None: any)

    def flash_sig(self, text: str) -> str:
        """A signature for a message shown after a redirect (a link cannot forge one)."""
        return hmac.new(self.auth.secret, b"flash:" + text.encode(), hashlib.sha256).hexdigest()
