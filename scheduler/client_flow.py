"""``Client``'s flow control (docs/flow-control.md), mixed into it: limits per scope, the
key rules that give jobs their limit keys, and where a key stands."""

from __future__ import annotations

from typing import TypeVar

from scheduler import flow, tasks, validation
from scheduler.flow import FlowState, Limit
from scheduler.limit_usage import TOP_KEYS, Hold, ScopeUsage
from scheduler.stores.base import FlowLimits, LimitKeyRules, Store

S = TypeVar("S")


class FlowControl:
    """The flow-control methods of ``Client`` (its ``store`` must keep limits: both
    stores do; a sharded namespace refuses them)."""

    store: Store

    def set_limit(self, scope: str, limit: Limit | None) -> bool:
        """Declare (or, with None, remove) the limit of ``scope``: a limit key
        (``"customer:42"``), a pattern of keys (``"customer:*"``, each key limited on its
        own) or ``"*"``; ``limit`` is ``flow.limit(rate=, per=, concurrency=)``. It holds
        fleet-wide from the next claim. True if it changed; bad input raises, writing nothing."""
        return self._flow().set_limit(*flow.declared(scope, limit))

    def limits(self) -> dict[str, Limit]:
        """Every declared limit, by scope."""
        return self._flow().limits()

    def flow_of(self, key: str) -> FlowState:
        """Where limit key ``key`` stands: the scope that governs it and its limit, its
        invocations running now, its starts within the rate's window."""
        return self._flow().flow_of(validation.limit_key(key))

    def limit_usage(self, top: int = TOP_KEYS) -> list[ScopeUsage]:
        """What waits on each declared limit now: per scope (by scope; [] without limits),
        over the keys it governs that have due or running work, their invocations running,
        starts in the rate's window, due jobs waiting and those held (their key's limit is
        full), the oldest wait, and the ``top`` keys by due jobs waiting. Read only, one
        consistent read in process; over Redis a few pipelined reads (docs/flow-control.md)."""
        return self._flow().limit_usage(top)

    def hold_of(self, job_id: str) -> Hold | None:
        """What holds job ``job_id`` back now: its key's limit, when the job is scheduled,
        due, and that limit is full at the time of reading (its wait is the limit's); None
        otherwise. Raises ``JobNotFoundError`` for an unknown job. Read only."""
        return self._flow().hold_of(validation.job_id(job_id))

    def set_key_rule(
        self,
        template: str | None,
        *,
        task: str | None = None,
        lane: str | None = None,
        new_task: bool = False,
    ) -> bool:
        """Declare (or, with None, remove) the key rule of one ``task`` or one ``lane``: a
        job added afterwards without a ``limit_key``, by any producer of the namespace,
        gets its key from its task's rule, else from its lane's rule (its own ``limit_key``
        wins). ``template``: literal text with ``{name}`` fields, each the job's keyword
        argument of that name, a str or an int (``"customer:{customer_id}"``; ``{{`` and
        ``}}`` are literal braces; a literal template, ``"task:send_email"``, puts all the
        task's jobs under one key). Jobs already stored keep their key. An enqueue whose
        rule needs an argument the job lacks raises ``KeyRuleError``, writing nothing. True
        if it changed; bad input raises, writing nothing. A sharded namespace refuses it.
        A rule for a task that no replica of the namespace has served (in process: that is
        not registered) is refused as a likely typo; ``new_task=True`` declares it for a
        task whose replicas have not started yet."""
        if task is not None and template is not None and not new_task:
            check_known_task(self.store, task)
        return self._rules().set_key_rule(template, task=task, lane=lane)

    def key_rules(self) -> dict[str, str]:
        """Every key rule: its name (``"task:<name>"``, ``"lane:<name>"``) -> its template."""
        return self._rules().key_rules()

    def _rules(self) -> LimitKeyRules:
        if not isinstance(self.store, LimitKeyRules):
            raise TypeError(f"{type(self.store).__name__} keeps no key rules")
        return checked(self.store)

    def _flow(self) -> FlowLimits:
        if not isinstance(self.store, FlowLimits):
            raise TypeError(f"{type(self.store).__name__} keeps no limits")
        return checked(self.store)


def checked(store: S) -> S:
    """``store``, once its namespace's shard count and data layout were checked, as its own
    reads check them (a newer duetime's layout: ``LayoutRefusedError``); a store with no
    such check (in process) as it is."""
    check = getattr(store, "check_namespace", None)  # RedisStore, ShardedStore
    if check is not None:
        check()
    return store


def check_known_task(store: Store, task: str) -> None:
    """Refuse (ValueError) a key rule for ``task`` when ``known_tasks`` does not name it."""
    bad = unknown_task(task, known_tasks(store))
    if bad is not None:
        raise bad


def unknown_task(task: str, known: set[str] | None) -> ValueError | None:
    """The error for a key rule naming ``task`` where ``known`` tasks are served (None:
    every task), or None: a rule for a task nothing serves is most likely a typo."""
    if known is None or task in known:
        return None
    listed = ", ".join(repr(t) for t in sorted(known)[:10]) or "none yet"
    return ValueError(
        f"no replica of this namespace serves task {task!r} (served: {listed}); check its "
        "name, or declare the rule with new_task=True (duetime limit rule set --new-task) "
        "for a task whose replicas have not started"
    )


def known_tasks(store: Store) -> set[str] | None:
    """The tasks a rule may name without ``new_task``: those a replica of a shared store's
    namespace has served (None: one serves every task), or in process those registered
    with ``@task``."""
    parts = getattr(store, "parts", None)
    if parts:
        from scheduler.stores.redis import rulebook
        from scheduler.stores.redis.protocol import requests

        return requests.run_on(parts[0], rulebook.served(parts[0].keys))
    return tasks.registered_names()
