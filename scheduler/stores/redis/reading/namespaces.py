"""Which namespaces a Redis holds, for the CLI's hints when a namespace looks mistyped
(``-n defualt``): a job enqueued there waits for a replica that never comes, and a job
looked up there is "not found". A namespace holds jobs once one was stored in it (add.lua
writes its ``layout`` key), and is served while a replica's ``replica:<id>`` key lives.
Both lists come from a SCAN of the keyspace, bounded (``SCANS``): a hint is left out
rather than made slow, and is looked for only where a command has already failed, or
after ``enqueue`` stored its job.
"""

from __future__ import annotations

import difflib
from typing import Any

from scheduler.stores.redis.reading.readable import AnyStore

SHOWN = 8  # namespaces named in a hint at most
SCANS = 50  # SCAN calls a hint may make (~50,000 keys, ~25 ms): a large keyspace is cut


def holds_jobs(store: AnyStore) -> bool:
    """Whether a job was ever stored in the namespace (a shard's layout key exists: each
    shard's own, as add.lua writes it where the job goes)."""
    return any(part.redis.exists(part.keys.layout) for part in store.parts)


def served(store: AnyStore) -> bool | None:
    """Whether a replica of the namespace is alive (any shard); None when a bounded SCAN
    could not tell (a large keyspace, or a Cluster: no note then)."""
    for part in store.parts:
        found, complete = _scan(part.redis, part.keys.replica("") + "*", first=True)
        if found:
            return True
        if not complete:
            return None
    return False


def named(store: AnyStore, suffix: str) -> list[str]:
    """The namespaces with a key ``duetime:{<ns>}:<suffix>`` (a shard's tag
    ``<ns>#<i>`` counts as ``<ns>``) among the keys a bounded SCAN reaches, sorted."""
    found: set[str] = set()
    for key in _scan(store.redis, "duetime:{*}:" + suffix)[0]:
        tag = str(key).split("{", 1)[1].split("}", 1)[0]
        found.add(tag.split("#", 1)[0])
    return sorted(found)


def _scan(redis: Any, match: str, *, first: bool = False) -> tuple[list[str], bool]:
    """The keys that match, from at most SCANS calls of SCAN (1,000 keys each), and
    whether the whole keyspace was seen; ``first``: stop at the first match. A Cluster
    client is not scanned (its SCAN visits every node): nothing, incomplete."""
    if hasattr(redis, "get_nodes"):
        return [], False
    keys: list[str] = []
    cursor = 0
    for _ in range(SCANS):
        cursor, batch = redis.scan(cursor, match=match, count=1000)
        keys += batch
        if cursor == 0 or (first and keys):
            break
    return keys, cursor == 0


def hint(store: AnyStore, namespace: str) -> str:
    """Nothing if the namespace holds jobs; else what this Redis holds, such as
    " (namespace 'defualt' holds no jobs; did you mean 'default'? namespaces here:
    default, reports)"."""
    if holds_jobs(store):
        return ""
    return f" (namespace {namespace!r} holds no jobs{others(store, namespace)})"


def others(store: AnyStore, namespace: str) -> str:
    """The namespaces other than ``namespace`` that hold jobs here, such as "; did you mean
    'default'? namespaces here: default, reports" ("" if none)."""
    return _others(named(store, "layout"), namespace)


def unserved_note(store: AnyStore, namespace: str) -> str | None:
    """None if a replica of the namespace is alive; else a note that says the job waits,
    and where replicas are alive (a mistyped namespace is the common cause)."""
    if served(store) is not False:
        return None
    elsewhere = [ns for ns in named(store, "replica:*") if ns != namespace]
    where = _others(elsewhere, namespace, "replicas are alive in")
    return (
        f"note: no replica is alive in namespace {namespace!r}: the job waits until one "
        f"runs (duetime run -n {namespace}){where}"
    )


def _others(names: list[str], namespace: str, label: str = "namespaces here") -> str:
    names = [n for n in names if n != namespace]
    if not names:
        return ""
    near = difflib.get_close_matches(namespace, names, 1)
    guess = f"; did you mean {near[0]!r}?" if near else ""
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    shown = ", ".join(names[:SHOWN]) + more
    return f"{guess} {label}: {shown}" if guess else f"; {label}: {shown}"
