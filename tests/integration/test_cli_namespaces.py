"""A mistyped namespace (``-n defualt``) is named as such: ``enqueue`` into a namespace
that no replica serves says the job waits (and where replicas are alive), and ``show``,
``cancel``, ``delete``, ``purge`` and ``stats`` of a namespace that holds no jobs say
which namespaces this Redis holds, with "did you mean". They used to succeed silently (the
job waited for a replica that never came) or say only "no job with id ...". A private
redis-server, so that the namespaces listed are this test's own."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from scheduler import Client
from scheduler.cli import main

pytestmark = pytest.mark.redis


def cli(url: str, *args: str):
    return CliRunner().invoke(main, [*args, "--redis", url])


@pytest.fixture
def url(private_redis):
    with Client(private_redis.url, namespace="reports") as client:
        client.enqueue("tests.noop", delay=600, job_id="weekly")
    return private_redis.url


def test_enqueue_where_no_replica_runs_says_the_job_waits_and_where_replicas_are(url):
    alone = cli(url, "enqueue", "tests.noop", "-n", "reports")
    assert alone.exit_code == 0, alone.output
    assert alone.stderr.strip() == (
        "note: no replica is alive in namespace 'reports': the job waits until one runs "
        "(duetime run -n reports)"
    )
    with Client(url, namespace="reports") as client:  # a live replica (its TTL key)
        key = client.store.parts[0].keys.replica("host-1-abc")
        client.store.redis.set(key, "0", px=60_000)
    typo = cli(url, "enqueue", "tests.noop", "-n", "reprots")
    assert typo.exit_code == 0 and typo.stdout.strip(), typo.output  # stored all the same
    assert "no replica is alive in namespace 'reprots'" in typo.stderr, typo.stderr
    assert "did you mean 'reports'? replicas are alive in: reports" in typo.stderr
    served = cli(url, "enqueue", "tests.noop", "-n", "reports")
    assert served.exit_code == 0 and served.stderr == "", served.stderr


@pytest.mark.parametrize("args", [["show", "weekly"], ["cancel", "weekly"], ["delete", "weekly"]])
def test_a_job_looked_up_in_an_empty_namespace_names_the_namespaces_here(url, args):
    out = cli(url, *args, "-n", "report")
    assert out.exit_code == 1, out.output
    assert "no job with id 'weekly' in namespace 'report'" in out.stderr, out.stderr
    assert "(namespace 'report' holds no jobs; did you mean 'reports'?" in out.stderr
    assert "namespaces here: reports)" in out.stderr
    found = cli(url, *args[:1], "nothere", "-n", "reports")  # the namespace holds jobs
    assert found.exit_code == 1 and "holds no jobs" not in found.stderr, found.stderr


def test_purge_and_stats_of_an_empty_namespace_say_what_is_here(url):
    purge = cli(url, "purge", "report", "--yes")
    assert purge.exit_code == 1, purge.output
    assert purge.stderr.strip() == (
        "error: nothing to purge: namespace 'report' holds no keys; did you mean "
        "'reports'? namespaces here: reports"
    )
    stats = cli(url, "stats", "-n", "report")
    assert stats.exit_code == 0, stats.output
    assert "none (nothing was ever enqueued; did you mean 'reports'?" in stats.stdout


def test_the_hints_scan_a_bounded_part_of_a_large_keyspace():
    """A SCAN that never ends (a huge keyspace) is cut after ``SCANS`` calls: the note is
    left out (unknown) rather than made slow."""
    from types import SimpleNamespace

    from scheduler.stores.redis.protocol.keys import Keys
    from scheduler.stores.redis.reading import namespaces

    calls = []

    class Endless:
        def scan(self, cursor, match, count):
            calls.append(cursor)
            return cursor + 1, []

    part = SimpleNamespace(redis=Endless(), keys=Keys("big"))
    store = SimpleNamespace(parts=[part], redis=part.redis)
    assert namespaces.served(store) is None
    assert len(calls) == namespaces.SCANS
    assert namespaces.unserved_note(store, "big") is None
    assert namespaces.named(store, "layout") == []


def test_a_sharded_namespace_whose_jobs_are_on_other_shards_holds_jobs(private_redis):
    url = private_redis.url
    with Client(url, namespace="wide", shards=4) as client:
        job = next(f"j{i}" for i in range(100) if client.store.shard(f"j{i}").keys.shard == 3)
        client.enqueue("tests.noop", delay=600, job_id=job)
    out = cli(url + "?shards=4", "show", "absent", "-n", "wide")
    assert out.exit_code == 1 and "holds no jobs" not in out.stderr, out.stderr
