"""The console's Limits page and a held job's page (docs/flow-control.md, "Watching
limits"), through Starlette's TestClient against a real redis-server: the same figures as
``Client.limit_usage`` and ``Client.hold_of``, as HTML and as JSON (the browser test
drives them in Chromium: test_browser.py)."""

from __future__ import annotations

import re

import pytest

from scheduler import Client, flow
from scheduler.stores.redis import RedisStore

pytestmark = pytest.mark.redis


@pytest.fixture
def held(redis_url: str, redis_ns: str) -> Client:
    """customer:* at 1 running: customer:1 has 3 jobs (1 runs, 2 held), customer:2 one
    (it runs); idle:* governs nothing busy; "free" has no limit."""
    client = Client(redis_url, namespace=redis_ns)
    client.set_limit("customer:*", flow.limit(concurrency=1))
    client.set_limit("idle:*", flow.limit(rate=5, per=60))
    for i in range(3):
        client.enqueue("t.x", job_id=f"c1-{i}", limit_key="customer:1")
    client.enqueue("t.x", job_id="c2-0", limit_key="customer:2")
    client.enqueue("t.x", job_id="free", limit_key="free", delay=3600)
    store = RedisStore(redis_url, redis_ns)
    claimed = store.claim_due({"default": 10}, 60.0, "o1").claims
    assert sorted(c.job_id for c in claimed) == ["c1-0", "c2-0"]
    store.close()
    return client


def test_the_limits_page_shows_what_waits_on_each_limit(console_factory, held, redis_ns):
    web, _ = console_factory()
    data = web.get(f"/api/ns/{redis_ns}/limits").json()
    assert data["sharded"] is False
    assert [s["scope"] for s in data["scopes"]] == ["customer:*", "idle:*"]
    c = data["scopes"][0]
    assert (c["keys"], c["full_keys"], c["running"], c["waiting"], c["held"]) == (2, 2, 2, 2, 2)
    assert c["limit_text"] == "1 at once" and c["limit"]["concurrency"] == 1
    assert [(k["key"], k["waiting"], k["full"]) for k in c["top"]] == [
        ("customer:1", 2, "concurrency"),
        ("customer:2", 0, "concurrency"),
    ]
    ours = [
        {"scope": u.scope, "keys": u.keys, "held": u.held, "waiting": u.waiting}
        for u in held.limit_usage()
    ]
    assert ours == [{k: s[k] for k in ("scope", "keys", "held", "waiting")} for s in data["scopes"]]
    page = web.get(f"/ns/{redis_ns}/limits")
    assert page.status_code == 200 and 'class="here">Limits' in page.text
    row = re.search(r'<tr data-scope="customer:\*">(.*?)</tr>', page.text).group(1)
    assert re.findall(r'<td class="n[^"]*">([^<]*)</td>', row)[:6] == ["2", "2", "2", "0", "2", "2"]
    assert "customer:*: its keys with the most due jobs waiting" in page.text
    assert "idle:*: its keys" not in page.text  # nothing busy under it


def test_a_held_job_says_what_holds_it(console_factory, held, redis_ns):
    web, _ = console_factory()
    detail = web.get(f"/api/ns/{redis_ns}/job/c1-1").json()
    assert detail["held"]["text"] == "limit customer:* (concurrency 1: 1 running)"
    assert (detail["held"]["key"], detail["held"]["reason"]) == ("customer:1", "concurrency")
    page = web.get(f"/ns/{redis_ns}/job/c1-1").text
    assert re.search(
        r'<td id="held">limit customer:\* \(concurrency 1: 1 running\), due [^<]+ ago</td>', page
    )
    for job_id in ("c1-0", "free"):  # it runs; it has no limit (and is not due)
        assert web.get(f"/api/ns/{redis_ns}/job/{job_id}").json()["held"] is None
        assert 'id="held"' not in web.get(f"/ns/{redis_ns}/job/{job_id}").text
    held.set_limit("customer:*", None)
    assert web.get(f"/api/ns/{redis_ns}/job/c1-1").json()["held"] is None


def test_a_namespace_without_limits_and_a_sharded_one(console_factory, redis_url, redis_ns):
    web, _ = console_factory()
    assert web.get(f"/api/ns/{redis_ns}/limits").json()["scopes"] == []
    assert 'id="no-limits"' in web.get(f"/ns/{redis_ns}/limits").text
    sharded, _ = console_factory(shards=3)
    data = sharded.get(f"/api/ns/{redis_ns}/limits").json()
    assert data == {"now": data["now"], "sharded": True, "scopes": []}
    assert 'id="sharded"' in sharded.get(f"/ns/{redis_ns}/limits").text
