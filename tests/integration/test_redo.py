"""Issue 13: failed and finished work you can see and redo: ``ls --state`` (listing.py, the
indexes retire.lua, dead.lua and pause.lua write), ``retry`` (retry.lua), ``delete``
(delete.lua) and ``purge``, through ``Client`` and the CLI."""

from __future__ import annotations

import json

import pytest

from scheduler.client import Client
from scheduler.errors import JobNotFoundError
from scheduler.model import Commit
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.reading import listing
from scheduler.testing import FakeClock

pytestmark = pytest.mark.redis
CAPS = {"default": 100, "slow": 100}


@pytest.fixture
def cli(ns_cli):
    return ns_cli  # tests/integration/conftest.py


@pytest.fixture
def rs(redis_url: str, redis_ns: str, clock: FakeClock):
    s = RedisStore(redis_url, redis_ns, clock=clock)
    yield s
    s.close()


@pytest.fixture(params=["Client", "AsyncClient"])
def client(request, rs, redis_url, redis_ns, clock):
    """The sync ``Client``, or ``AsyncClient`` on redis.asyncio (same namespace, same
    fake clock) behind a blocking view: every test here runs on both."""
    if request.param == "Client":
        yield Client(rs)
        return
    from scheduler import AsyncClient
    from tests.helpers import Blocking

    aio = AsyncClient(redis_url, namespace=redis_ns)
    aio.store.clock = clock
    with Blocking(aio) as view:
        yield view


def ids(page: listing.Page) -> list[str]:
    return [i.job_id for i in page.jobs]


def all_pages(client: Client, state: str, limit: int, task: str | None = None) -> list[str]:
    out, cursor, pages = [], None, 0
    while True:
        page = client.list_jobs(state, task=task, limit=limit, cursor=cursor)
        assert len(page.jobs) <= limit
        out += ids(page)
        pages += 1
        cursor = page.cursor
        if cursor is None or pages > 50:
            return out


def fail_now(rs: RedisStore, job_id: str) -> None:
    """Claim what is due and fail ``job_id``'s invocation for good (dead-lettered)."""
    (c,) = [c for c in rs.claim_due(CAPS, 10.0, "o1").claims if c.job_id == job_id]
    assert rs.fail(c, "boom", None) is Commit.OK


def test_scheduled_pages_come_in_due_order_across_lanes(client):
    for n in range(7):  # due at 70, 60, ... 10 s; lanes alternate; two tasks
        lane = "slow" if n % 2 else "default"
        task = "t.a" if n % 3 else "t.b"
        client.enqueue(task, delay=70 - 10 * n, job_id=f"j{n}", lane=lane)
    expected = [f"j{n}" for n in reversed(range(7))]
    assert all_pages(client, "scheduled", 3) == expected
    assert all_pages(client, "scheduled", 1) == expected
    assert all_pages(client, "scheduled", 50) == expected
    assert all_pages(client, "scheduled", 2, task="t.b") == ["j6", "j3", "j0"]
    first = client.list_jobs("scheduled", limit=8)  # (a full page may precede an empty one)
    assert first.cursor is None and ids(first) == expected
    with pytest.raises(ValueError, match="state must be one of"):
        client.list_jobs("sleeping")
    with pytest.raises(ValueError, match="not a cursor"):
        client.list_jobs("scheduled", cursor="nonsense!")


@pytest.mark.parametrize(
    ("state", "inner"),
    [
        ("all", [1e999, 0]),  # json.loads reads 1e999 as infinity
        ("all", [99999999999999999999999, 0]),  # past a SCAN cursor: Redis said "invalid cursor"
        ("paused", [0, -1]),
        ("live", [1e999, None]),
        ("live", [7, None]),
        ("failed", [1e999, "x"]),
        ("scheduled", [float("nan"), "x"]),
        ("dead", ["-inf", "x"]),
    ],
)
def test_a_crafted_cursor_is_refused_as_not_a_cursor(client, state, inner):
    """A cursor is opaque text, but a console's URL carries it: one crafted with an
    infinite or out-of-range number was an OverflowError (the console's 500) or a Redis
    error (its 503, blaming Redis)."""
    client.enqueue("t.a", delay=60, job_id="j0")
    cursor = listing.encode_cursor(0, inner)
    with pytest.raises(ValueError, match="not a cursor"):
        client.list_jobs(state, cursor=cursor)


def test_paused_cancelled_and_all(client):
    for n in range(3):
        client.enqueue("t.a", delay=60, job_id=f"j{n}")
    assert client.pause("j1")
    assert ids(client.list_jobs("paused")) == ["j1"]
    assert sorted(all_pages(client, "scheduled", 1)) == ["j0", "j2"]
    assert client.resume("j1") and ids(client.list_jobs("paused")) == []
    assert client.pause("j2") and client.cancel("j2")
    assert ids(client.list_jobs("paused")) == [] and ids(client.list_jobs("cancelled")) == ["j2"]
    assert sorted(all_pages(client, "all", 1)) == ["j0", "j1", "j2"]
    assert sorted(all_pages(client, "live", 2)) == ["j0", "j1"]


def test_a_failed_one_off_is_listed_retried_and_succeeds(client, rs, clock):
    client.enqueue("t.fails", job_id="f1")
    client.enqueue("t.ok", job_id="ok1")
    fail_now(rs, "f1")
    [ok] = [c for c in rs.claim_due(CAPS, 10.0, "o1").claims if c.job_id == "ok1"] or [None]
    assert ids(client.list_jobs("failed")) == ["f1"] and ids(client.list_jobs("dead")) == ["f1"]
    assert client.get("f1").state == "failed"
    assert rs.redis.pttl(rs.keys.job("f1")) > 0  # retired: expires in a day
    assert client.retry("f1") == 1
    info = client.get("f1")
    assert info.state == "scheduled" and info.dead_letters == ()
    assert rs.redis.pttl(rs.keys.job("f1")) == -1  # live again
    assert ids(client.list_jobs("failed")) == [] and ids(client.list_jobs("dead")) == []
    (c,) = rs.claim_due(CAPS, 10.0, "o1").claims
    assert c.job_id == "f1" and c.attempt == 1
    with pytest.raises(ValueError, match="running"):
        client.retry("f1")
    assert rs.complete(c, None) is Commit.OK
    assert "f1" in ids(client.list_jobs("succeeded"))
    with pytest.raises(ValueError, match="no dead letter"):
        client.retry("f1")
    with pytest.raises(JobNotFoundError):
        client.retry("never-was")
    kinds = [e.kind for e in client.events(50) if e.job_id == "f1"]
    assert "retried_by_operator" in kinds


def test_a_recurring_job_reruns_each_dead_lettered_invocation_once(client, rs, clock):
    client.enqueue("t.tick", every=60, job_id="r1")
    clock.advance(60)
    (c,) = rs.claim_due(CAPS, 10.0, "o1").claims
    sched = c.scheduled
    assert rs.fail(c, "boom", None) is Commit.OK
    assert client.get("r1").state == "scheduled" and len(client.get("r1").dead_letters) == 1
    assert client.retry_failed(task="t.other") == {}
    assert client.retry_failed(task="t.tick") == {"r1": 1}
    (again,) = rs.claim_due(CAPS, 10.0, "o1").claims
    assert (again.job_id, again.scheduled, again.attempt) == ("r1", sched, 1)
    assert client.retry_failed() == {}  # each once: the dead letters were taken


def test_delete_removes_everything_and_a_running_commit_is_not_a_lease_loss(client, rs):
    client.enqueue("t.a", job_id="d1")
    client.enqueue("t.a", job_id="d2", every=60)
    client.enqueue("t.a", job_id="gone-failed")
    claims = {c.job_id: c for c in rs.claim_due(CAPS, 10.0, "o1").claims}
    assert rs.fail(claims["gone-failed"], "boom", None) is Commit.OK
    assert client.delete("d1") and client.delete("d2") and client.delete("gone-failed")
    assert not client.delete("d1")
    prefix = rs.keys.prefix  # a random namespace: its own letters may contain "d1"
    keys = [k[len(prefix) :] for k in rs.redis.scan_iter(match=prefix + "*")]
    leftover = [k for k in keys if "d1" in k or "d2" in k]
    assert leftover == []
    assert ids(client.list_jobs("failed")) == [] and ids(client.list_jobs("dead")) == []
    assert rs.complete(claims["d1"], None) is Commit.NOT_FOUND
    assert rs.redis.hlen(rs.keys.running) == 0 and rs.redis.zcard(rs.keys.lease) == 0
    assert rs.get("d1") is None  # the commit did not bring the job back
    assert [c.job_id for c in rs.claim_due(CAPS, 10.0, "o1").claims] == []


def test_heartbeat_does_not_report_a_deleted_job_as_a_lost_lease():
    from workers.heartbeat import Heartbeat

    lost = []
    hb = Heartbeat.__new__(Heartbeat)
    import threading

    hb._lock, hb._held, hb._finishing = threading.Lock(), {}, set()
    hb._lost = lambda *a: lost.append(a)

    class C:
        token = "t1"

    hb._held["t1"] = (C, object())
    hb.settled(C, Commit.NOT_FOUND)
    assert lost == []
    hb._held["t1"] = (C, object())
    hb.settled(C, Commit.LEASE_LOST)
    assert len(lost) == 1


# ---- the CLI ---------------------------------------------------------------------------------


def test_cli_ls_state_json_and_paging(cli, client, rs):
    for n in range(3):
        client.enqueue("t.a", delay=10 * (n + 1), job_id=f"j{n}")
    r = cli("ls", "--state", "scheduled", "--limit", "2", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert [j["job_id"] for j in data["jobs"]] == ["j0", "j1"] and data["cursor"]
    r = cli("ls", "--state", "scheduled", "--limit", "2", "--cursor", data["cursor"])
    assert r.exit_code == 0 and r.output.splitlines()[1].split()[0] == "j2"
    assert "more:" not in r.output
    r = cli("ls", "--state", "scheduled", "--limit", "2")
    more = r.output.splitlines()[-1]
    assert (
        more.startswith("more: duetime ls -n ") and " --limit 2 --state scheduled --cursor " in more
    )
    assert cli("ls", "--state", "sleeping").exit_code == 2
    assert cli("ls", "--cursor", "%%%").exit_code == 2
    assert "no failed jobs" in cli("ls", "--state", "failed").output


def test_cli_retry_delete_and_their_refusals(cli, client, rs):
    client.enqueue("t.fails", job_id="f1")
    fail_now(rs, "f1")
    client.enqueue("t.fails", job_id="c1")  # cancelled while it ran, then failed: its dead
    (c,) = [c for c in rs.claim_due(CAPS, 10.0, "o1").claims if c.job_id == "c1"]
    client.cancel("c1")
    assert rs.fail(c, "stopped", None) is Commit.OK  # letter stays; retry refuses it
    r = cli("retry", "--failed", "--dry-run", "--json")  # listed c1 too, which retry refused
    assert r.exit_code == 0 and json.loads(r.output) == {"dry_run": True, "jobs": ["f1"]}
    r = cli("retry", "f1", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["queued"] == 1
    r = cli("retry", "f1")
    assert r.exit_code == 1 and "no dead letter" in r.output and len(r.output.splitlines()) == 1
    assert cli("retry", "nope").exit_code == 1
    assert cli("retry").exit_code == 2 and cli("retry", "f1", "--failed").exit_code == 2
    assert cli("retry", "--failed").exit_code == 1  # nothing to retry
    r = cli("delete", "f1", "--json")
    assert r.exit_code == 0 and json.loads(r.output) == {"job_id": "f1", "deleted": True}
    r = cli("delete", "f1")
    assert r.exit_code == 1 and "no job" in r.output


def test_cli_purge_counts_asks_and_refuses_while_replicas_live(cli, client, rs, redis_ns):
    client.enqueue("t.a", delay=60, job_id="p1")
    r = cli("purge", redis_ns, "--dry-run", "--json")
    keys = json.loads(r.output)["keys"]
    assert r.exit_code == 0 and keys >= 2
    assert cli("purge", redis_ns, input="n\n").exit_code == 1
    assert client.get("p1")
    rs.redis.set(rs.keys.replica("r-1"), "1", px=60_000)
    r = cli("purge", redis_ns, "--yes")
    assert r.exit_code == 1 and "r-1" in r.output and "--force" in r.output
    r = cli("purge", redis_ns, "--yes", "--force", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["deleted"] == keys + 1
    assert list(rs.redis.scan_iter(match=rs.keys.prefix + "*")) == []
    assert cli("purge", "bad ns", "--yes").exit_code == 2


def test_show_gives_run_durations_and_the_last_traceback(cli, client, rs, clock):
    client.enqueue("t.tick", every=60, job_id="r1")
    for took, boom in ((1.5, False), (2.25, True)):
        clock.advance(60)
        (c,) = rs.claim_due(CAPS, 10.0, "o1").claims
        clock.advance(took)
        if boom:
            tb = 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: boom\n'
            assert rs.fail(c, "ValueError: boom", None, tb) is Commit.OK
        else:
            assert rs.complete(c, None) is Commit.OK
    r = cli("show", "r1")
    assert r.exit_code == 0, r.output
    assert "durations    2.25s failed, 1.5s succeeded (newest first)" in r.output
    assert "traceback    (of the last error)" in r.output and "  ValueError: boom" in r.output
    data = json.loads(cli("show", "r1", "--json").output)
    assert [(x["duration"], x["outcome"]) for x in data["recent_runs"]] == [
        (2.25, "failed"),
        (1.5, "succeeded"),
    ]
    assert data["last_traceback"].endswith("ValueError: boom\n")


def test_an_index_of_another_type_never_stops_a_script(client, rs):
    for key in (rs.keys.done("failed"), rs.keys.dead_jobs, rs.keys.paused):
        rs.redis.set(key, "planted")
    client.enqueue("t.a", job_id="x1")
    client.enqueue("t.a", job_id="x2", delay=60)
    assert client.pause("x2") and client.resume("x2")
    fail_now(rs, "x1")  # retires (done:failed) and dead-letters (dead-jobs)
    assert client.get("x1").state == "failed"
    assert client.retry("x1") == 1 and client.delete("x1")
    assert rs.redis.get(rs.keys.paused) == "planted"
    with pytest.raises(Exception, match="WRONGTYPE"):
        client.list_jobs("paused")


def test_live_lists_running_paused_then_scheduled_without_scanning_keys(client, rs):
    for n in range(3000):  # other data in the database: live pages do not SCAN it
        rs.redis.set(f"other:{n}", "x")
    for n in range(4):
        client.enqueue("t.a", delay=0 if n == 0 else 60 + n, job_id=f"l{n}")
    rs.claim_due(CAPS, 10.0, "o1")
    assert client.pause("l3")
    assert all_pages(client, "live", 50) == ["l0", "l3", "l1", "l2"]
    assert all_pages(client, "live", 1) == ["l0", "l3", "l1", "l2"]
    rs.redis.delete(*[f"other:{n}" for n in range(3000)])
