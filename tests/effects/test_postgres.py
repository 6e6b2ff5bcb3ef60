"""workers.effects.postgres against a private PostgreSQL (tests/pg_fixtures.py): the guard
commits a transaction only with the newest fence of its occurrence, the outcome is recorded
in the same transaction, a newer owner waits for an older one's open transaction."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from scheduler import JobScheduler
from workers.effects import Fence, StaleFenceError
from workers.effects.postgres import (
    aensure_ledger,
    afenced_transaction,
    arecord_outcome,
    ensure_ledger,
    fenced_transaction,
    ledger_table,
    record_outcome,
)

pytestmark = pytest.mark.postgres

WAIT = 10.0
SCHED = 1_767_225_600_000


@pytest.fixture
def table() -> str:
    return f"fx_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def conn(pg_url: str, table: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        ensure_ledger(c, table)
        c.execute(f"CREATE TABLE {table}_orders (inv text PRIMARY KEY, amount int, fence bigint)")
        yield c


def order(conn: psycopg.Connection[Any], table: str, f: Fence, amount: int) -> None:
    """The user's effect: an upsert keyed by the invocation."""
    conn.execute(
        f"INSERT INTO {table}_orders VALUES (%s, %s, %s) ON CONFLICT (inv) DO UPDATE"
        " SET amount = EXCLUDED.amount, fence = EXCLUDED.fence",
        (f.invocation_id, amount, f.fence),
    )


def orders(conn: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT inv, amount, fence FROM {table}_orders ORDER BY inv").fetchall()


def write(conn: psycopg.Connection[Any], table: str, f: Fence, amount: int) -> None:
    with fenced_transaction(conn, table=table, invocation=f):
        order(conn, table, f, amount)


def test_a_lower_fence_is_refused_and_commits_nothing(conn, table):
    old, new = Fence("pay", SCHED, 5), Fence("pay", SCHED, 7)
    write(conn, table, old, 10)
    write(conn, table, new, 11)  # a re-run: applied, as an upsert
    with pytest.raises(StaleFenceError, match=r"^write refused by the PostgreSQL ledger fx_") as e:
        write(conn, table, old, 12)
    assert (e.value.fence, e.value.newest, e.value.job_id) == (5, 7, "pay")
    write(conn, table, new, 13)  # the same fence again: applied
    assert orders(conn, table) == [(f"pay@{SCHED}", 13, 7)]  # the effect exists once
    other = Fence("pay", SCHED + 60_000, 3)  # another occurrence has its own fence
    write(conn, table, other, 1)
    assert len(orders(conn, table)) == 2


def test_a_refused_transaction_rolls_back_what_the_block_would_write(conn, table):
    write(conn, table, Fence("pay", SCHED, 7), 1)
    with conn.transaction():  # an outer transaction: the guard is a savepoint in it
        order(conn, table, Fence("other", SCHED, 1), 1)
        with pytest.raises(StaleFenceError):
            write(conn, table, Fence("pay", SCHED, 6), 2)
    assert orders(conn, table) == [(f"other@{SCHED}", 1, 1), (f"pay@{SCHED}", 1, 7)]


def test_the_outcome_commits_with_the_effect_and_a_rerun_sees_it(conn, table):
    f = Fence("pay", SCHED, 4)
    with fenced_transaction(conn, table=table, invocation=f) as row:
        assert (row.fence, row.has_outcome, row.outcome) == (f, False, None)
        order(conn, table, f, 10)
        record_outcome(conn, {"order": 1}, table=table, invocation=f)
    with fenced_transaction(conn, table=table, invocation=Fence("pay", SCHED, 9)) as row:
        assert (row.has_outcome, row.outcome) == (True, {"order": 1})  # skip the effect
    with pytest.raises(StaleFenceError):
        record_outcome(conn, {"order": 2}, table=table, invocation=f)
    with pytest.raises(TypeError, match="not JSON serializable"):
        record_outcome(conn, object(), table=table, invocation=Fence("pay", SCHED, 9))
    null = Fence("none", SCHED, 1)
    record_outcome(conn, None, table=table, invocation=null)  # JSON null is an outcome
    with fenced_transaction(conn, table=table, invocation=null) as row:
        assert (row.has_outcome, row.outcome) == (True, None)


def test_a_failed_block_records_nothing(conn, table):
    f = Fence("pay", SCHED, 4)
    with pytest.raises(ZeroDivisionError), fenced_transaction(conn, table=table, invocation=f):
        order(conn, table, f, 10)
        record_outcome(conn, "done", table=table, invocation=f)
        1 / 0  # noqa: B018
    assert orders(conn, table) == []
    assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)


def backend_waits_on_a_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return row is not None and row[0] == "Lock"


def test_a_newer_owner_waits_for_an_open_older_transaction(conn, pg_url, table):
    """The older owner's transaction holds the ledger row: the newer one's guard waits,
    then sees the older commit and goes on; the older one, after, is refused."""
    old, new = Fence("pay", SCHED, 5), Fence("pay", SCHED, 8)
    newer_done = threading.Event()
    with psycopg.connect(pg_url, autocommit=True) as c2:
        pid = c2.info.backend_pid

        def newer() -> None:
            write(c2, table, new, 2)
            newer_done.set()

        with fenced_transaction(conn, table=table, invocation=old):
            order(conn, table, old, 1)
            t = threading.Thread(target=newer)
            t.start()
            with psycopg.connect(pg_url, autocommit=True) as watch:
                deadline = time.monotonic() + WAIT
                while not backend_waits_on_a_lock(watch, pid):  # another process: poll it
                    assert time.monotonic() < deadline, "the newer owner never waited"
                    time.sleep(0.01)
            assert not newer_done.is_set()
        t.join(WAIT)
        assert newer_done.is_set()
    with pytest.raises(StaleFenceError):
        write(conn, table, old, 3)
    assert orders(conn, table) == [(f"pay@{SCHED}", 2, 8)]


def test_inside_a_job_the_running_invocation_is_used(pg_url, table):
    done, seen = threading.Event(), []

    def job() -> None:
        with psycopg.connect(pg_url) as c, fenced_transaction(c, table=table) as row:
            seen.append(row.fence)
        done.set()

    with psycopg.connect(pg_url, autocommit=True) as c:
        ensure_ledger(c, table)
    with JobScheduler(num_workers=1) as s:
        job_id = s.schedule(job, 0)
        assert done.wait(WAIT)
    [f] = seen
    assert f.job_id == str(job_id) and f.fence >= 1


def test_outside_a_job_and_with_a_bad_table_it_says_what_to_do(conn):
    outside = r"^fenced_transaction\(\) needs the invocation"
    with pytest.raises(RuntimeError, match=outside), fenced_transaction(conn):
        pass
    for bad in ("x; drop table y", "1x", "a.b.c", "", "a-b", "x" * 64):
        with pytest.raises(ValueError, match=r"^the ledger table must be a name"):
            ledger_table(bad)
    ensure_ledger(conn, "public.Fences_Mixed")  # quoted: the case is kept
    assert conn.execute("SELECT to_regclass('public.\"Fences_Mixed\"')").fetchone() != (None,)


def test_the_async_helpers_keep_the_same_contract(pg_url, table):
    async def main() -> list[tuple[Any, ...]]:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as c:
            await aensure_ledger(c, table)
            for f in (Fence("pay", SCHED, 2), Fence("pay", SCHED, 3)):
                async with afenced_transaction(c, table=table, invocation=f) as row:
                    await arecord_outcome(c, {"fence": f.fence}, table=table, invocation=f)
            assert row.has_outcome and row.outcome == {"fence": 2}
            with pytest.raises(StaleFenceError):
                async with afenced_transaction(c, table=table, invocation=Fence("pay", SCHED, 2)):
                    pass
            cur = await c.execute(f"SELECT fence, outcome FROM {table}")
            return await cur.fetchall()

    assert asyncio.run(main()) == [(3, {"fence": 3})]
