"""Fenced writes to PostgreSQL (psycopg 3, sync and async; the ``postgres`` extra).

Guarantee: a transaction opened by ``fenced_transaction`` commits only while the
invocation's fence is the newest seen for its ``(job_id, scheduled_ms)`` by the ledger
table; a stale one raises ``StaleFenceError`` before the block runs, and nothing of it
commits. The ledger row is upserted and locked at the start of the transaction and kept
locked until its commit, so a newer owner's transaction waits for this one and then sees
its fence, and a stale owner's transaction that starts after a newer one committed is
refused.

What it does not do: protect a write made outside the guarded transaction or on another
connection or database, or make the user's writes idempotent. A re-run with a newer fence
is let through, so the effect exists once only if the job writes it as an upsert keyed by
the invocation (``fence.invocation_id``), or skips it when the occurrence already has an
outcome (``record_outcome`` in the same transaction; ``LedgerRow.has_outcome`` at the next
one). docs/effects.md has the examples.

The ledger (``ensure_ledger``): one row per occurrence, ``job_id text``, ``scheduled_ms
bigint`` (the primary key), ``fence bigint``, ``outcome jsonb`` (NULL until recorded),
``updated_at timestamptz``. Its name is validated and quoted as an identifier.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from workers.effects import Fence, Invocation, StaleFenceError, fence_of

__all__ = [
    "DEFAULT_TABLE",
    "LedgerRow",
    "aensure_ledger",
    "afenced_transaction",
    "arecord_outcome",
    "ensure_ledger",
    "fenced_transaction",
    "ledger_table",
    "record_outcome",
]

DEFAULT_TABLE = "duetime_fences"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

_CREATE = (
    "CREATE TABLE IF NOT EXISTS {t} ("
    " job_id text NOT NULL,"
    " scheduled_ms bigint NOT NULL,"
    " fence bigint NOT NULL,"
    " outcome jsonb,"
    " updated_at timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (job_id, scheduled_ms))"
)
# The guard: the row's fence raised to ours unless it is higher; no row back = refused.
_GUARD = (
    "INSERT INTO {t} AS l (job_id, scheduled_ms, fence) VALUES (%s, %s, %s)"
    " ON CONFLICT (job_id, scheduled_ms) DO UPDATE"
    " SET fence = EXCLUDED.fence, updated_at = now() WHERE l.fence <= EXCLUDED.fence"
    " RETURNING l.outcome IS NOT NULL, l.outcome"
)
_RECORD = (
    "INSERT INTO {t} AS l (job_id, scheduled_ms, fence, outcome) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (job_id, scheduled_ms) DO UPDATE"
    " SET fence = EXCLUDED.fence, outcome = EXCLUDED.outcome, updated_at = now()"
    " WHERE l.fence <= EXCLUDED.fence"
    " RETURNING true, l.outcome"
)
_NEWEST = "SELECT fence FROM {t} WHERE job_id = %s AND scheduled_ms = %s"


@dataclass(frozen=True)
class LedgerRow:
    """What ``fenced_transaction`` yields: the invocation it guards (``fence``), and
    whether a transaction of this occurrence already committed an outcome
    (``has_outcome``; ``outcome`` is that JSON value, which may itself be None)."""

    fence: Fence
    has_outcome: bool
    outcome: Any


def ledger_table(name: str = DEFAULT_TABLE) -> sql.Identifier:
    """The ledger's name as a quoted identifier: ``name`` or ``schema.name``, each part
    1-63 letters, digits or ``_``, not starting with a digit. ``ValueError`` otherwise."""
    parts = name.split(".") if isinstance(name, str) else []
    if not 1 <= len(parts) <= 2 or not all(_NAME.match(p) for p in parts):
        raise ValueError(
            "the ledger table must be a name or schema.name, each part 1-63 letters, "
            f"digits or _ and not starting with a digit, got {name!r}"
        )
    return sql.Identifier(*parts)


def _query(template: str, table: str) -> sql.Composed:
    return sql.SQL(template).format(t=ledger_table(table))


def _sink(table: str) -> str:
    return f"the PostgreSQL ledger {table}"


def _args(f: Fence) -> tuple[str, int, int]:
    return f.job_id, f.scheduled_ms, f.fence


def ensure_ledger(conn: psycopg.Connection[Any], table: str = DEFAULT_TABLE) -> None:
    """Create the ledger table if it does not exist (in its own transaction, or a
    savepoint of the one open). Run it once, at start-up or in a migration."""
    with conn.transaction():
        conn.execute(_query(_CREATE, table))


def _checked(
    conn: psycopg.Connection[Any], template: str, params: tuple[Any, ...], f: Fence, table: str
) -> tuple[bool, Any]:
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(_query(template, table), params).fetchone()
        if row is not None:
            return bool(row[0]), row[1]
        newest = cur.execute(_query(_NEWEST, table), params[:2]).fetchone()
    raise StaleFenceError(*_args(f), newest[0] if newest else None, _sink(table))


@contextmanager
def fenced_transaction(
    conn: psycopg.Connection[Any],
    *,
    table: str = DEFAULT_TABLE,
    invocation: Invocation | None = None,
) -> Iterator[LedgerRow]:
    """A transaction on ``conn`` that commits only with the newest fence of the running
    invocation (or ``invocation``): the ledger row of its occurrence is upserted and
    locked first; a stale fence raises ``StaleFenceError`` and the transaction is rolled
    back. Write the effect inside the block, as an upsert keyed by
    ``row.fence.invocation_id``, or skip it when ``row.has_outcome``. The block commits
    when it ends (a savepoint if a transaction is already open on ``conn``: then the
    outer commit is what counts); an exception rolls it back."""
    f = fence_of(invocation, "fenced_transaction()")
    with conn.transaction():
        has, outcome = _checked(conn, _GUARD, _args(f), f, table)
        yield LedgerRow(f, has, outcome)


def record_outcome(
    conn: psycopg.Connection[Any],
    result: Any,
    *,
    table: str = DEFAULT_TABLE,
    invocation: Invocation | None = None,
) -> None:
    """Record ``result`` (a JSON value) as the occurrence's outcome in the ledger, in the
    transaction open on ``conn`` (inside ``fenced_transaction``: it commits with the
    effect, or not at all). The same check as the guard: a stale fence raises
    ``StaleFenceError`` and records nothing. ``TypeError`` if ``result`` is not JSON."""
    f = fence_of(invocation, "record_outcome()")
    _checked(conn, _RECORD, (*_args(f), Jsonb(result)), f, table)


# ---- the same on psycopg's AsyncConnection ------------------------------------------------


async def aensure_ledger(conn: psycopg.AsyncConnection[Any], table: str = DEFAULT_TABLE) -> None:
    """``ensure_ledger`` on an ``AsyncConnection``."""
    async with conn.transaction():
        await conn.execute(_query(_CREATE, table))


async def _achecked(
    conn: psycopg.AsyncConnection[Any], template: str, params: tuple[Any, ...], f: Fence, table: str
) -> tuple[bool, Any]:
    async with conn.cursor(row_factory=tuple_row) as cur:
        row = await (await cur.execute(_query(template, table), params)).fetchone()
        if row is not None:
            return bool(row[0]), row[1]
        newest = await (await cur.execute(_query(_NEWEST, table), params[:2])).fetchone()
    raise StaleFenceError(*_args(f), newest[0] if newest else None, _sink(table))


@asynccontextmanager
async def afenced_transaction(
    conn: psycopg.AsyncConnection[Any],
    *,
    table: str = DEFAULT_TABLE,
    invocation: Invocation | None = None,
) -> AsyncIterator[LedgerRow]:
    """``fenced_transaction`` on an ``AsyncConnection`` (``async with``)."""
    f = fence_of(invocation, "afenced_transaction()")
    async with conn.transaction():
        has, outcome = await _achecked(conn, _GUARD, _args(f), f, table)
        yield LedgerRow(f, has, outcome)


async def arecord_outcome(
    conn: psycopg.AsyncConnection[Any],
    result: Any,
    *,
    table: str = DEFAULT_TABLE,
    invocation: Invocation | None = None,
) -> None:
    """``record_outcome`` on an ``AsyncConnection``."""
    f = fence_of(invocation, "arecord_outcome()")
    await _achecked(conn, _RECORD, (*_args(f), Jsonb(result)), f, table)
