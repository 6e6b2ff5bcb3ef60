"""Issue 12's two reports, as found: 30 good jobs due at the same ms, one planted bad item,
3 replicas claiming in turn. Before the fix claim.lua removed the whole fetched batch from
the due set, then raised a Lua error on the bad member (scripts do not roll back): good
jobs vanished, and those before the bad one were left half-claimed."""

from __future__ import annotations

import pytest
import redis

from scheduler.model import After
from scheduler.stores.redis import RedisStore
from tests.helpers import read_job_field, spec, write_job_field

pytestmark = pytest.mark.redis

GOOD = 30
REPLICAS = ("r1", "r2", "r3")


def plant(rs: RedisStore, corrupt) -> list[str]:
    """GOOD one-off jobs due now, with the bad one added in the middle (FIFO order)."""
    good = [f"g{i:02d}" for i in range(GOOD)]
    for name in good[: GOOD // 2]:
        rs.add(spec(name, After(0)))
    rs.add(spec("bad", After(0)))
    for name in good[GOOD // 2 :]:
        rs.add(spec(name, After(0)))
    corrupt(rs.redis, rs.keys.job("bad"))
    return good


def claim_all(rs: RedisStore) -> tuple[dict[str, list[str]], list[str]]:
    """Replicas claim in turn (10 each) until a full round claims nothing: job -> tokens,
    and the errors the calls raised."""
    tokens: dict[str, list[str]] = {}
    errors: list[str] = []
    for _ in range(20):
        got = 0
        for owner in REPLICAS:
            try:
                claims = rs.claim_due({"default": 10}, 30, owner).claims
            except redis.ResponseError as exc:
                errors.append(str(exc).split("script:")[0])
                continue
            for c in claims:
                tokens.setdefault(c.job_id, []).append(c.token)
            got += len(claims)
        if not got:
            break
    return tokens, errors


def outcome(rs: RedisStore, good: list[str], tokens: dict[str, list[str]]) -> dict[str, list]:
    r = rs.redis
    running = r.hgetall(rs.keys.running)
    due = set(r.zrange(rs.keys.due("default"), 0, -1))
    lost, half, doubled = [], [], []
    for name in good:
        held = [t for t in tokens.get(name, []) if t in running and r.zscore(rs.keys.lease, t)]
        pending = any(m.endswith(f"|s|{name}") for m in due)
        if len(tokens.get(name, [])) > 1:
            doubled.append(name)
        if not held and not pending:
            (half if read_job_field(r, rs.keys.job(name), "running") == "1" else lost).append(name)
    return {"lost": lost, "half-claimed": half, "doubled": doubled}


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda r, k: write_job_field(r, k, "next", "soon"), id="next-is-text"),
        pytest.param(lambda r, k: write_job_field(r, k, "running", "soon"), id="running-is-text"),
        pytest.param(lambda r, k: (r.delete(k), r.set(k, "x")), id="job-key-is-a-string"),
    ],
)
def test_one_corrupt_job_takes_no_good_job_with_it(rs, corrupt):
    good = plant(rs, corrupt)
    tokens, errors = claim_all(rs)
    assert outcome(rs, good, tokens) == {"lost": [], "half-claimed": [], "doubled": []}
    assert errors == []
    assert sorted(tokens) == good  # every good job claimed (once), the bad one never
    assert rs.redis.hexists(rs.keys.quarantined, "bad")
