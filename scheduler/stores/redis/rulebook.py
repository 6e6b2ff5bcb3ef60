"""A namespace's key rules over Redis (scheduler/keyrules.py; docs/flow-control.md, "A
job's limit key"): rule.lua to change one, the listing, and ``RuleCache``, the rules a
client applies to the jobs it adds with their stamp, so that an add costs no read of them.

The stamp (``keyrules:stamp``, "<changes>.<ms>") changes with every change of a rule, in
the same script. A client sends the stamp of the rules it applied with each add.lua call;
a call whose stamp is not the namespace's is refused whole, nothing written, and the add
path (adds.py) reloads the rules and sends the refused jobs again, once. Operations here
are generators of requests (protocol/requests.py): the sync stores and ``AsyncStore`` run
the same code.
"""

from __future__ import annotations

from typing import Any

from scheduler.errors import StoreCorruptError
from scheduler.keyrules import EMPTY, KeyRules
from scheduler.stores.redis.protocol import records, script_args
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Calls, Op, Script

#: The stamp of a namespace whose rules never changed (add.lua reads a missing stamp so): a
#: new client assumes it, so adds to a namespace without rules never read them.
NEVER_CHANGED = "0"


class RuleCache:
    """The key rules one client (one store, one part) applies to the jobs it adds, and
    their stamp. A new cache holds no rules at ``NEVER_CHANGED``: right for a namespace
    without rules, and refused by add.lua (then reloaded) for one with rules."""

    __slots__ = ("rules", "stamp")

    def __init__(self) -> None:
        self.rules: KeyRules = EMPTY
        self.stamp: str = NEVER_CHANGED


def load(keys: Keys, cache: RuleCache) -> Op[None]:
    """Read the namespace's rules into ``cache``: the stamp first, then the rules, in one
    pipeline. A change between the two reads leaves an older stamp with newer rules, which
    add.lua refuses (and the add path reloads): never newer rules stamped as older ones."""
    stamp, rules = yield Calls(
        keys.shard,
        (("get", (keys.rules_stamp,), {}), ("hgetall", (keys.key_rules,), {})),
        lenient=True,
    )
    for key, got in ((keys.rules_stamp, stamp), (keys.key_rules, rules)):
        if isinstance(got, Exception):
            raise StoreCorruptError(
                f"{key} cannot be read ({got}): duetime cannot apply this namespace's key "
                f"rules while it is so. Inspect it (redis-cli TYPE {key}), rename it out of "
                "the way or delete it, then set the rules again (duetime limit rule set)",
                key,
            )
    cache.rules = stored(rules)
    cache.stamp = str(stamp) if stamp else NEVER_CHANGED


def stored(got: Any) -> KeyRules:
    """A ``keyrules`` hash as read (a rule that does not parse, written by hand, is left
    out)."""
    return KeyRules({str(k): str(v) for k, v in (got or {}).items()})


def set_rule(keys: Keys, name: str, template: str | None) -> Op[bool]:
    """rule.lua: declare (None: remove) the rule ``name`` (checked by the caller:
    ``keyrules.declared``); True if it changed (the stamp changed with it)."""
    stamp = yield Script(keys.shard, "rule", script_args.rule(name, template))
    return bool(stamp)


def served(keys: Keys) -> Op[set[str] | None]:
    """Every task a replica of the namespace has served (its ``tasks`` hash: live replicas
    and those not yet found dead); None when one serves every task."""
    replies = yield Calls(keys.shard, (("hvals", (keys.tasks,), {}),))
    out: set[str] = set()
    for text in replies[0]:
        names = records.served_names(text)
        if names is None:
            return None
        out.update(names)
    return out


def rules(keys: Keys) -> Op[dict[str, str]]:
    """Every key rule of the namespace, by name (those that parse)."""
    replies = yield Calls(keys.shard, (("hgetall", (keys.key_rules,), {}),))
    return stored(replies[0]).rules
