"""The fakeredis tier runs the scripts as Redis 7 does: each lua/ script as its Redis
Functions library (``FCALL``, protocol/scripts.py), which fakeredis loads and runs through
lupa. The shipped source keeps its ``#!lua`` line (docs/shared-mode.md: ``flags=allow-oom``
lets a script that records an outcome run on an out-of-memory server), which the library
declares as its function's flags."""

from __future__ import annotations

import pytest

from scheduler.model import After, Commit
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.protocol import gateway
from scheduler.stores.redis.protocol import scripts as lua
from scheduler.testing import FakeClock
from tests.conftest import START
from tests.fakeredis_fixtures import fakeredis_client
from tests.helpers import spec
from tests.lua.test_scripts import libraries

pytestmark = pytest.mark.fakeredis

names = pytest.mark.parametrize("name", lua.SCRIPTS)


@pytest.fixture
def fake_store():
    s = RedisStore(fakeredis_client(), "fake", clock=FakeClock(start=START))
    yield s
    s.close()


@names
def test_the_shipped_source_starts_with_its_shebang(name):
    assert lua.source(name).startswith("#!lua")


@names
def test_every_library_loads_and_runs_on_fakeredis(fake_store, name):
    """Called with no arguments of its own, a script's function fails in its own checks or
    code (a run-time error), never while fakeredis loads its library."""
    script = fake_store._scripts[name]
    argv = [fake_store.keys.prefix, str(START * 1000)]
    try:
        gateway.call(fake_store.redis, script, [fake_store.keys.epoch], argv)
    except Exception as exc:
        assert "Error registering functions" not in str(exc)
        assert "Function not found" not in str(exc)
    assert script.function in libraries(fake_store.redis)


def test_a_job_round_trip_runs_on_the_libraries(fake_store):
    assert fake_store.add(spec("a", After(0))).outcome == "created"
    (claim,) = fake_store.claim_due({"default": 1}, 30, "owner-1").claims
    assert fake_store.complete(claim, "done") is Commit.OK
    assert fake_store.get("a").runs == 1
    assert not hasattr(fake_store.redis, gateway.SCRIPTS_ONLY)  # sent as FCALL


def test_claim_request_ids_are_unique_and_take_no_system_randomness(monkeypatch):
    """claim.lua keeps the last reply per owner and answers a repeated request id with it,
    so each request of an owner needs an id of its own (two stores may share an owner:
    a prefix of their own). They are drawn without os.urandom: it lets go of the GIL, and
    a dispatcher waiting to get it back while its workers run held up its claim round."""
    import os
    import re

    from scheduler.stores.redis import RedisStore
    from tests.fakeredis_fixtures import fakeredis_client

    one, two = RedisStore(fakeredis_client(), "a"), RedisStore(fakeredis_client(), "a")
    for s in (one, two):
        s._upkeep_at = float("inf")

    def no_urandom(n: int) -> bytes:
        raise AssertionError("os.urandom called while making a claim request")

    monkeypatch.setattr(os, "urandom", no_urandom)
    ids = [s.claim_request({"default": 5}, 30.0, "owner").argv[1] for s in (one, two) * 50]
    assert len(set(ids)) == 100
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", i) for i in ids)  # claim.lua's pattern
