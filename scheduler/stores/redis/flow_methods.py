"""``RedisStore``'s flow control, mixed in (docs/flow-control.md): limits (limit.lua,
``FlowLimits``; what waits on them: reading/limits.py) and key rules (rule.lua,
``LimitKeyRules``), each one operation of ops.py, rulebook.py or reading/limits.py run
on the store (``AsyncClient`` runs the same operations)."""

from __future__ import annotations

from typing import Protocol

from scheduler import flow, keyrules, validation
from scheduler.flow import FlowState, Limit
from scheduler.limit_usage import TOP_KEYS, Hold, ScopeUsage
from scheduler.stores.redis import ops, rulebook
from scheduler.stores.redis.protocol import requests
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.reading import limits


class FlowPart(requests.Part, Protocol):
    """What the flow methods need of a ``RedisStore``: a part with its keys."""

    @property
    def keys(self) -> Keys: ...


class FlowMethods:
    """``RedisStore``'s limits and key rules (mixed in; each is an operation run on it)."""

    def set_limit(self: FlowPart, scope: str, limit: Limit | None) -> bool:
        """``FlowLimits``: declare (None: remove) the limit of ``scope``, from the next claim."""
        return requests.run_on(self, ops.set_limit(self.keys, *flow.declared(scope, limit)))

    def limits(self: FlowPart) -> dict[str, Limit]:
        return requests.run_on(self, ops.limits(self.keys))

    def flow_of(self: FlowPart, key: str) -> FlowState:
        return requests.run_on(self, ops.flow_of(self.keys, validation.limit_key(key)))

    def limit_usage(self: FlowPart, top: int = TOP_KEYS) -> list[ScopeUsage]:
        """What waits on each declared limit now (``FlowLimits``; reading/limits.py)."""
        return requests.run_on(self, limits.usage(self.keys, top))

    def hold_of(self: FlowPart, job_id: str) -> Hold | None:
        """What holds ``job_id`` back now: its key's full limit, or None (``FlowLimits``)."""
        return requests.run_on(self, limits.hold(self.keys, validation.job_id(job_id)))

    def set_key_rule(
        self: FlowPart, template: str | None, *, task: str | None = None, lane: str | None = None
    ) -> bool:
        """``LimitKeyRules``: declare (None: remove) the key rule of ``task`` or ``lane``;
        it applies to the jobs added after it, by every producer (their adds carry the
        stamp of the rules they applied: stores/redis/rulebook.py)."""
        name, text = keyrules.declared(template, task, lane)
        return requests.run_on(self, rulebook.set_rule(self.keys, name, text))

    def key_rules(self: FlowPart) -> dict[str, str]:
        return requests.run_on(self, rulebook.rules(self.keys))
