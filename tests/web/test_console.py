"""The web console's pages, JSON endpoints, actions and refusals, through Starlette's
TestClient against a real redis-server (the browser tests drive the same app in
Chromium: test_browser.py)."""

from __future__ import annotations

import re
import time

import pytest

from scheduler import Client
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.reading import console_history
from tests.helpers import write_job_field

pytestmark = pytest.mark.redis

EVIL_ID = '<script>alert("id")</script>'
EVIL_ARGS = {"note": "<img src=x onerror=alert(1)>", "html": "</td><script>alert(2)</script>"}
PAGES = ["", "jobs", "running", "failed", "recurring", "events", "limits"]


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


@pytest.fixture
def jobs(redis_url: str, redis_ns: str) -> Client:
    client = Client(redis_url, namespace=redis_ns)
    client.enqueue("tests.web.evil", kwargs=EVIL_ARGS, job_id=EVIL_ID, delay=3600)
    client.enqueue("tests.web.report", cron="30 2 * * *", tz="Europe/Berlin", job_id="nightly")
    client.enqueue("tests.web.tick", every=60, job_id="tick", lane="fast")
    return client


def test_every_page_renders_with_data_and_has_a_json_endpoint(console_factory, jobs, redis_ns):
    web, _ = console_factory()
    for page in PAGES:
        r = web.get(f"/ns/{redis_ns}/{page}")
        assert r.status_code == 200, (page, r.text[:300])
        assert 'id="json-link"' in r.text
        api = re.search(r'href="([^"]+)" id="json-link"', r.text).group(1)
        assert web.get(api).status_code == 200, api
    listed = web.get(f"/api/ns/{redis_ns}/jobs").json()
    assert {j["job_id"] for j in listed["jobs"]} == {EVIL_ID, "nightly", "tick"}
    overview = web.get(f"/api/ns/{redis_ns}/overview").json()
    assert overview["queued"] == 3 and {lane["lane"] for lane in overview["lanes"]} == {
        "default",
        "fast",
    }
    assert len(overview["minutes"]) == 60
    assert web.get(f"/api/ns/{redis_ns}/").json()["queued"] == 3  # /api + the page's path
    detail = web.get(f"/api/ns/{redis_ns}/job/nightly").json()
    assert len(detail["upcoming"]) >= 10 and detail["definition"]["schedule"].startswith("cron")
    assert detail["scanned"] == 2000 and detail["events"][0]["kind"] == "scheduled"
    everything = web.get(f"/api/ns/{redis_ns}/job/nightly", params={"scan": "all"}).json()
    assert everything["scanned"] is None and everything["events"] == detail["events"]
    assert web.get("/").status_code == 200  # redirected to the first namespace
    headers = web.get(f"/ns/{redis_ns}/jobs").headers
    assert (
        headers["x-frame-options"] == "DENY"
        and "frame-ancestors 'none'" in headers["content-security-policy"]
    )


def test_filters_and_paging(console_factory, jobs, redis_ns):
    web, _ = console_factory()
    api = f"/api/ns/{redis_ns}/jobs"
    assert [j["job_id"] for j in web.get(api, params={"lane": "fast"}).json()["jobs"]] == ["tick"]
    assert [j["job_id"] for j in web.get(api, params={"prefix": "nig"}).json()["jobs"]] == [
        "nightly"
    ]
    assert web.get(api, params={"task": "tests.web.evil"}).json()["jobs"][0]["job_id"] == EVIL_ID
    first = web.get(api, params={"state": "scheduled"}).json()
    assert first["cursor"] is None and len(first["jobs"]) == 3
    assert web.get(api, params={"state": "nope"}).status_code == 400


def test_ids_args_and_errors_are_escaped_everywhere(console_factory, jobs, redis_ns):
    """A job whose id and arguments hold markup and script: every page shows them as text."""
    from urllib.parse import quote

    web, _ = console_factory(actions=True, token="t0ken")
    web.post("/login", data={"token": "t0ken"})
    paths = [f"/ns/{redis_ns}/{p}" for p in PAGES]
    paths += [f"/ns/{redis_ns}/job/{quote(EVIL_ID, safe='')}", f"/ns/{redis_ns}/jobs?prefix=%3C"]
    paths += [f"/ns/{redis_ns}/job/{quote('<b>missing</b>', safe='')}"]
    for path in paths:
        html = web.get(path).text
        for raw in ("<script>alert", "<img src=x", "</td><script>", "<b>missing"):
            assert raw not in html, (path, raw)
    detail = web.get(f"/ns/{redis_ns}/job/{quote(EVIL_ID, safe='')}").text
    assert "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;" in detail
    assert "&lt;img src=x onerror=alert(1)&gt;" in detail


def test_read_only_by_default_and_refusals(console_factory, jobs, redis_ns):
    web, _ = console_factory()
    page = web.get(f"/ns/{redis_ns}/job/tick").text
    assert 'id="readonly"' in page and "act-pause" not in page
    r = web.post(f"/ns/{redis_ns}/act/pause", data={"job": "tick"})
    assert r.status_code == 403 and "read-only" in r.text
    r = web.post(f"/api/ns/{redis_ns}/act/pause", data={"job": "tick"})
    assert r.status_code == 403 and "read-only" in r.json()["error"]
    assert jobs.get("tick").state == "scheduled"


def test_a_refused_post_is_refused_before_its_body_is_read_and_a_form_is_bounded(
    console_factory, jobs, redis_ns, monkeypatch
):
    """A POST nobody may make was read whole (150 MB: the console's memory went from 150 MB
    to 588 MB) before the 403; a form past its limit is a 413 that does nothing."""
    from scheduler.web import actions

    monkeypatch.setattr(actions, "MAX_FORM", 1000)
    body = "job=tick&" + "x" * 5000
    ro, _ = console_factory()
    assert ro.post(f"/api/ns/{redis_ns}/act/pause", content=body).status_code == 403
    web, _ = console_factory(actions=True, token="tok")
    bearer = {"Authorization": "Bearer tok", "Content-Type": "application/x-www-form-urlencoded"}
    assert web.post(f"/api/ns/{redis_ns}/act/pause", content=body).status_code == 403
    r = web.post(f"/api/ns/{redis_ns}/act/pause", content=body, headers=bearer)
    assert r.status_code == 413 and "larger than 1,000 bytes" in r.json()["error"]
    assert jobs.get("tick").state == "scheduled"
    assert web.post("/login", content="token=" + "x" * 20_000).status_code == 413
    r = web.post(f"/api/ns/{redis_ns}/act/pause", data={"job": "tick"}, headers=bearer)
    assert r.status_code == 200 and jobs.get("tick").state == "paused"


def test_api_actions_say_by_their_status_when_nothing_was_done(console_factory, jobs, redis_ns):
    """An action refused for every job it names is a 422 (it was a 200 a script could tell
    only by parsing the text), an unknown action a 404; nothing is recorded for a job
    that does not exist."""
    web, _ = console_factory(actions=True, token="tok")
    bearer = {"Authorization": "Bearer tok"}
    act = f"/api/ns/{redis_ns}/act"
    r = web.post(f"{act}/resume", data={"job": "nope"}, headers=bearer)
    assert r.status_code == 422 and "nope: refused: no job with id 'nope'" in r.json()["done"]
    r = web.post(f"{act}/delete", data={"job": "nope"}, headers=bearer)
    assert r.status_code == 422
    r = web.post(f"{act}/resume", data={"job": ["nope", "tick"]}, headers=bearer)
    assert r.status_code == 200 and "tick: no effect (the job is scheduled)" in r.json()["done"]
    r = web.post(
        f"{act}/backfill", data={"job": "nightly", "start": "x", "end": "y"}, headers=bearer
    )
    assert r.status_code == 422 and "refused" in r.json()["done"]
    r = web.post(f"{act}/explode", data={"job": "tick"}, headers=bearer)
    assert r.status_code == 404 and "unknown action 'explode'" in r.json()["error"]
    events = web.get(f"/api/ns/{redis_ns}/events", params={"kind": "operator"}).json()["events"]
    assert [e["job_id"] for e in events] == ["tick"]


def test_token_login_csrf_and_the_event_naming_who(console_factory, jobs, redis_ns):
    web, _ = console_factory(actions=True, token="s3cret-token", label="alice")
    assert web.post(f"/ns/{redis_ns}/act/pause", data={"job": "tick"}).status_code == 403
    bad = web.post("/login", data={"token": "wrong"})
    assert bad.status_code == 403 and 'id="login-failed"' in bad.text
    ok = web.post("/login", data={"token": "s3cret-token"}, follow_redirects=False)
    assert ok.status_code == 303 and "s3cret" not in ok.headers["location"]
    page = web.get(f"/ns/{redis_ns}/job/tick").text
    assert 'id="actor">alice' in page
    stale = web.post(f"/ns/{redis_ns}/act/pause", data={"job": "tick", "csrf": "0" * 64})
    assert stale.status_code == 403 and "CSRF" in stale.text
    form = {"job": "tick", "csrf": csrf_of(page), "next": f"/ns/{redis_ns}/job/tick"}
    done = web.post(f"/ns/{redis_ns}/act/pause", data=form)
    assert done.status_code == 200 and 'id="flash">pause' in done.text
    assert jobs.get("tick").state == "paused"
    events = web.get(f"/api/ns/{redis_ns}/events", params={"kind": "operator"}).json()["events"]
    assert events[0]["job_id"] == "tick" and "by alice (session)" in events[0]["detail"]
    forged = web.get(f"/ns/{redis_ns}/?flash=you+were+hacked&sig=00").text
    assert "you were hacked" not in forged  # a message needs the console's signature


def test_bearer_token_for_scripts_and_trusted_proxy(console_factory, jobs, redis_ns):
    web, _ = console_factory(actions=True, token="tok", label="ci")
    api = f"/api/ns/{redis_ns}/act/trigger"
    wrong = {"Authorization": "Bearer guess-1234"}
    refused = web.post(api, data={"job": "tick"}, headers=wrong)
    assert refused.status_code == 403
    error = refused.json()["error"]  # said as such, not as "not logged in"
    assert error.startswith("refused: wrong token: the Authorization: Bearer token is not")
    assert "guess-1234" not in refused.text and "tok" not in error.replace("token", "")
    r = web.post(api, data={"job": "tick"}, headers={"Authorization": "Bearer tok"})
    assert r.status_code == 200 and "tick: done" in r.json()["done"]
    proxied, _ = console_factory(actions=True, proxy_header="X-Forwarded-User")
    headers = {"X-Forwarded-User": "bob"}
    page = proxied.get(f"/ns/{redis_ns}/job/tick", headers=headers).text
    form = {"job": "tick", "csrf": csrf_of(page)}
    assert proxied.post(f"/ns/{redis_ns}/act/pause", data=form, headers=headers).status_code == 200
    no_header = proxied.post(f"/ns/{redis_ns}/act/resume", data=form)
    assert no_header.status_code == 403 and "did not name a user (no x-forwarded-user" in (
        no_header.text.lower()  # not "sign in with the console's token": there is none
    )
    detail = proxied.get(f"/api/ns/{redis_ns}/events", params={"kind": "operator"}).json()
    assert "pause by bob (proxy)" in detail["events"][0]["detail"]


def test_failed_jobs_retry_and_delete_one_by_one_and_in_bulk(console_factory, redis_url, redis_ns):
    from scheduler.engine import Scheduler
    from scheduler.stores.redis import RedisStore
    from tests.faults.fleet import wait_until
    from tests.web import tasks  # noqa: F401  (registers tests.web.boom)

    client = Client(redis_url, namespace=redis_ns)
    for n in range(3):
        client.enqueue("tests.web.boom", job_id=f"bad-{n}")
    store = RedisStore(redis_url, redis_ns)
    with Scheduler(2, store=store, owner="t") as engine:
        wait_until(lambda: len(client.list_jobs("dead").jobs) == 3, 20)
        engine.shutdown(wait=True)
    web, _ = console_factory(actions=True, token="tok")
    web.post("/login", data={"token": "tok"})
    page = web.get(f"/ns/{redis_ns}/failed").text
    assert page.count('name="job" value="bad-') == 3 and "boom &lt;b&gt;not bold" in page
    form = {"job": ["bad-0"], "csrf": csrf_of(page), "next": f"/ns/{redis_ns}/failed"}
    r = web.post(f"/ns/{redis_ns}/act/delete", data=form)
    assert "bad-0: deleted" in r.text
    r = web.post(f"/ns/{redis_ns}/act/retry", data={**form, "job": ["bad-1", "nope"]})
    assert "bad-1: queued 1 run(s); nope: refused:" in r.text
    assert client.get("bad-1").state == "scheduled"
    r = web.post(f"/ns/{redis_ns}/act/retry_failed", data={"csrf": form["csrf"]})
    assert "retry all failed: 1 run(s) of 1 job(s) queued" in r.text
    assert client.get("bad-2").state == "scheduled"
    detail = web.get(f"/api/ns/{redis_ns}/events", params={"kind": "operator"}).json()
    assert [e["job_id"] for e in detail["events"]] == ["bad-2", "bad-1", "bad-0"]
    store.close()


def test_redacted_arguments(console_factory, jobs, redis_ns):
    web, _ = console_factory(redact=True)
    for page in ("jobs", "job/tick", f"job/{EVIL_ID}"):
        html = web.get(f"/ns/{redis_ns}/{page}").text
        assert "onerror" not in html and "(redacted)" in html
    assert "onerror" not in web.get(f"/api/ns/{redis_ns}/jobs").text


def test_redacted_arguments_stay_hidden_in_the_errors_that_quote_them(
    console_factory, redis_url, redis_ns
):
    """A job's error message, its traceback's message lines and its failure events may quote
    its arguments: --redact-args hides them and keeps the exception type and the frames."""
    from scheduler import RetryPolicy
    from scheduler.engine import Scheduler
    from scheduler.stores.redis import RedisStore
    from tests.faults.fleet import wait_until
    from tests.web import tasks  # noqa: F401  (registers tests.web.leak)

    secret = "4111-SECRET-1111"
    client = Client(redis_url, namespace=redis_ns)
    client.enqueue(
        "tests.web.leak",
        kwargs={"card": secret},
        job_id="charge",
        retry=RetryPolicy(2, backoff=0.01),
    )
    with Scheduler(1, store=RedisStore(redis_url, redis_ns), owner="t") as engine:
        wait_until(lambda: len(client.list_jobs("dead").jobs) == 1, 20)
        engine.shutdown(wait=True)
    web, _ = console_factory()
    assert secret in web.get(f"/ns/{redis_ns}/failed").text  # shown without --redact-args
    web, _ = console_factory(redact=True)
    paths = ["jobs?state=all", "job/charge", "failed", "events", "events?kind=failed"]
    for path in paths + [f"api/{p}" for p in paths]:
        page = web.get(
            f"/{path.replace('api/', 'api/ns/' + redis_ns + '/', 1)}"
            if path.startswith("api/")
            else f"/ns/{redis_ns}/{path}"
        )
        assert page.status_code == 200 and secret not in page.text, path
    job = web.get(f"/api/ns/{redis_ns}/job/charge").json()["job"]
    assert job["last_error"] == "RuntimeError: (redacted)"
    assert 'in leak\n    raise RuntimeError(f"could not charge card {card}' in job["last_traceback"]
    assert job["last_traceback"].endswith("RuntimeError: (redacted)\n(redacted)")
    client.close()


def test_charts_read_the_replicas_minutes(console_factory, jobs, redis_ns):
    web, console = console_factory()
    store = console.stores[redis_ns]
    now = int(time.time())
    info = {"version": "9.9", "host": "h", "pid": 1, "started": now, "heartbeat": now, "workers": 4}
    minute = now // 60
    console_history.record(
        store, "r1", minute - 5, {"succeeded": 7, "failed": 1}, {"lag_p99": 12.5}, info
    )
    console_history.record(store, "r2", minute - 5, {"succeeded": 3}, {"lag_p99": 40.0}, info)
    data = web.get(f"/api/ns/{redis_ns}/overview").json()
    row = next(m for m in data["minutes"] if m["minute"] == minute - 5)
    assert (row["succeeded"], row["failed"], row["lag_p99"]) == (10, 1, 40.0)
    assert {r["id"]: r["version"] for r in data["replicas"]} == {"r1": "9.9", "r2": "9.9"}
    assert not any(r["alive"] for r in data["replicas"])  # no claim: no live key
    html = web.get(f"/ns/{redis_ns}/").text
    assert "9.9" in html and 'id="chart-lag"' in html


def test_charts_forget_their_cached_minutes_when_redis_lost_the_data(
    console_factory, jobs, redis_ns
):
    """A finished minute is cached; after Redis lost the namespace's data (its epoch went),
    the cache is dropped, not drawn on for the next hour."""
    web, console = console_factory()
    store = console.stores[redis_ns]
    store.adopt_epoch()
    now = int(time.time())
    info = {"version": "9.9", "host": "h", "pid": 1, "started": now, "heartbeat": now, "workers": 4}
    console_history.record(store, "r1", now // 60 - 5, {"succeeded": 7}, {}, info)

    def succeeded() -> int:
        data = web.get(f"/api/ns/{redis_ns}/overview").json()
        return sum(m["succeeded"] for m in data["minutes"])

    assert succeeded() == 7  # read, and cached (a finished minute)
    for key in store.redis.scan_iter(match=store.keys.prefix + "*"):  # Redis lost it all
        store.redis.delete(key)
    assert succeeded() == 0


def test_unknown_namespace_and_job_are_404(console_factory, redis_ns):
    web, _ = console_factory()
    r = web.get("/ns/other/jobs")
    assert r.status_code == 404 and "add --namespace other" in r.text
    assert web.get(f"/api/ns/{redis_ns}/job/nope").json()["error"].startswith("no job")


def test_a_sharded_namespace(console_factory, redis_url, redis_ns):
    client = Client(redis_url, namespace=redis_ns, shards=3)
    ids = client.enqueue_many({"task": "t.x", "job_id": f"s{n}", "delay": 60} for n in range(30))
    client.enqueue("t.y", every=30, job_id="every-30")
    web, _ = console_factory(shards=3, actions=True, token="tok")
    assert web.get(f"/api/ns/{redis_ns}/overview").json()["queued"] == 31
    listed = web.get(f"/api/ns/{redis_ns}/jobs", params={"state": "scheduled"}).json()
    more = web.get(
        f"/api/ns/{redis_ns}/jobs", params={"state": "scheduled", "cursor": listed["cursor"]}
    ).json()
    assert len({j["job_id"] for j in listed["jobs"] + more["jobs"]}) == 31
    for job_id in (ids[7], "every-30"):
        assert web.get(f"/ns/{redis_ns}/job/{job_id}").status_code == 200
    r = web.post(
        f"/api/ns/{redis_ns}/act/pause",
        data={"job": "every-30"},
        headers={"Authorization": "Bearer tok"},
    )
    assert r.status_code == 200 and client.get("every-30").state == "paused"
    assert "every-30" in web.get(f"/ns/{redis_ns}/recurring").text
    client.close()


def test_a_job_due_past_the_year_9999_is_shown_not_a_failure(console_factory, redis_url, redis_ns):
    """Data no version of duetime writes now (an older one did; or garbage): a due time or a
    long interval's later occurrences past what a datetime shows. Every page and listing
    renders, showing the epoch; none answers 400 ("year 33715 is out of range")."""
    import redis
    from click.testing import CliRunner

    from scheduler.cli import main

    client = Client(redis_url, namespace=redis_ns)
    client.enqueue("tests.web.tick", delay=60, job_id="far")
    client.enqueue("tests.web.tick", every=5e10, job_id="long")  # 10 occurrences: 15,800 years
    far_ms = 1_001_796_157_004_897
    raw = redis.Redis.from_url(redis_url)
    write_job_field(raw, f"duetime:{{{redis_ns}}}:job:far", "next", str(far_ms))
    raw.close()
    web, _ = console_factory()
    for path in ["jobs", "job/far", "job/long", "recurring", ""]:
        r = web.get(f"/ns/{redis_ns}/{path}")
        assert r.status_code == 200, (path, r.text[:300])
    assert "outside the years 1-9999" in web.get(f"/ns/{redis_ns}/job/far").text
    upcoming = web.get(f"/api/ns/{redis_ns}/job/long").json()["upcoming"]
    assert len(upcoming) == 10 and "outside the years" in upcoming[-1]["local"], upcoming
    env = {"DUETIME_REDIS_URL": redis_url, "DUETIME_NAMESPACE": redis_ns}
    for args in (["ls"], ["ls", "--json"], ["show", "far"], ["show", "far", "--json"]):
        out = CliRunner().invoke(main, args, env=env)
        assert out.exit_code == 0, (args, out.output)
        assert "outside the years 1-9999" in out.output, (args, out.output)


def test_cancel_and_stop_a_job_running_on_a_replica(
    console_factory, jobs, make_engine, clock, redis_url, redis_ns
):
    """The running page and the job page offer "cancel and stop" (cancel, and ask the
    running invocations to stop: the replica's heartbeat reads it at its next renewal);
    the job page offers "cancel" to a job with runs to come. Read-only: neither."""
    from tests.integration.test_interrupt import LEASE, _running, _seen

    client, job = _running(make_engine, clock, redis_url, redis_ns)
    assert "act-stop" not in console_factory()[0].get(f"/ns/{redis_ns}/running").text
    web, _ = console_factory(actions=True, token="tok")
    web.post("/login", data={"token": "tok"})
    page = web.get(f"/ns/{redis_ns}/running").text
    assert page.count("act-stop") == 1 and f'name="job" value="{job}"' in page
    detail = web.get(f"/ns/{redis_ns}/job/{job}").text
    assert "act-stop" in detail and "act-cancel" not in detail  # a running one-off: no run to come
    form = {"job": [job], "csrf": csrf_of(page), "next": f"/ns/{redis_ns}/running"}
    r = web.post(f"/ns/{redis_ns}/act/stop", data=form)
    assert f"{job}: no run to come; asked 1 running invocation(s) to stop" in r.text
    assert not _seen["stopped"].is_set()
    clock.advance(LEASE / 3 + 0.01)
    assert _seen["stopped"].wait(10)
    assert "act-cancel" in web.get(f"/ns/{redis_ns}/job/tick").text
    r = web.post(f"/ns/{redis_ns}/act/cancel", data={**form, "job": ["tick", "nope"]})
    assert "tick: cancelled; nope: refused: no job with id &#39;nope&#39;" in r.text
    assert client.get("tick").state == "cancelled"
    r = web.post(f"/ns/{redis_ns}/act/cancel", data={**form, "job": ["tick"]})
    assert "tick: no effect (the job is cancelled)" in r.text
    events = web.get(f"/api/ns/{redis_ns}/events", params={"kind": "operator"}).json()["events"]
    assert [e["job_id"] for e in events] == ["tick", "tick", job]


def test_a_job_id_holding_a_percent_escape_links_back_to_itself(
    console_factory, redis_url, redis_ns
):
    """The page's "back" target (after an action) and its JSON link were rebuilt from the
    decoded path: job ``a%2Fb`` linked to job ``a/b`` (a 404, or another job)."""
    client = Client(redis_url, namespace=redis_ns)
    client.enqueue("t.x", delay=600, job_id="a%2Fb")
    client.enqueue("t.x", delay=600, job_id="a/b")
    web, _ = console_factory(actions=True, token="tok")
    web.post("/login", data={"token": "tok"})
    page = web.get(f"/ns/{redis_ns}/job/a%252Fb").text
    assert f'name="next" value="/ns/{redis_ns}/job/a%252Fb"' in page
    assert f'href="/api/ns/{redis_ns}/job/a%252Fb"' in page
    form = {"job": ["a%2Fb"], "csrf": csrf_of(page), "next": f"/ns/{redis_ns}/job/a%252Fb"}
    r = web.post(f"/ns/{redis_ns}/act/pause", data=form, follow_redirects=False)
    assert r.headers["location"].startswith(f"/ns/{redis_ns}/job/a%252Fb?flash=")
    assert client.get("a%2Fb").state == "paused" and client.get("a/b").state == "scheduled"
    client.close()


def test_an_unexpected_error_is_a_one_line_500_with_the_same_headers(
    console_factory, jobs, redis_ns, monkeypatch, caplog
):
    """Starlette's own 500 came from outside the hardening middleware: no CSP, no
    X-Frame-Options. Now the console answers it, and logs the traceback."""
    from scheduler.web import data

    def broken(store):
        raise RuntimeError("a bug")

    monkeypatch.setattr(data, "running", broken)
    web, _ = console_factory()
    r = web.get(f"/ns/{redis_ns}/running")
    assert r.status_code == 500 and r.text.startswith("internal error")
    assert (
        r.headers["x-frame-options"] == "DENY"
        and "frame-ancestors" in r.headers["content-security-policy"]
    )
    assert "RuntimeError: a bug" in caplog.text


def test_list_pages_clip_the_arguments_in_their_tooltips(console_factory, redis_url, redis_ns):
    """The jobs and failed pages put every argument in a tooltip: 60 jobs of 60 KB made a
    10.8 MB page."""
    client = Client(redis_url, namespace=redis_ns)
    client.enqueue_many(
        {"task": "t.x", "delay": 600, "kwargs": {"blob": "<&>" * 15_000}} for _ in range(20)
    )
    web, _ = console_factory()
    page = web.get(f"/ns/{redis_ns}/jobs").text
    assert page.count('class="args"') == 20 and len(page) < 250_000  # was ~4 MB
    assert len(web.get(f"/api/ns/{redis_ns}/jobs").text) > 20 * 45_000  # JSON: whole
    client.close()


def test_an_unknown_api_path_answers_json(console_factory, jobs, redis_ns):
    web, _ = console_factory()
    for path in ("/api/nope", f"/api/ns/{redis_ns}/nope", f"/api/ns/{redis_ns}/jobs/extra"):
        r = web.get(path)
        assert r.status_code == 404 and r.json()["error"].startswith("no such endpoint"), path
    assert web.get("/nope").status_code == 404  # pages: Starlette's own


def test_each_event_has_an_id_of_its_own(console_factory, redis_url, redis_ns):
    """The changes of one batch entry (a claim of several jobs) shared its stream id: the
    live tail, which skips the ids it has shown, could hide some of them."""
    client = Client(redis_url, namespace=redis_ns)
    client.enqueue_many({"task": "t.x", "job_id": f"b{n}", "delay": 0} for n in range(5))
    store = RedisStore(redis_url, redis_ns)
    assert len(store.claim_due({"default": 5}, 30, "o").claims) == 5  # one batch entry
    web, _ = console_factory()
    events = web.get(f"/api/ns/{redis_ns}/events", params={"kind": "claimed"}).json()["events"]
    ids = [e["id"] for e in events]
    assert len(ids) == 5 and len(set(ids)) == 5
    page = web.get(f"/ns/{redis_ns}/events").text
    assert len(set(re.findall(r'data-id="([^"]+)"', page))) == page.count("data-id=")
    store.close()
    client.close()


def test_jobs_no_live_replica_serves_are_shown_waiting_with_what_each_replica_serves(
    console_factory, redis_url, redis_ns
):
    """Task-aware claims (docs/guarantees.md): a replica that lacks a task leaves its jobs
    waiting; the overview, the job list and the job page say so, and who serves what."""
    client = Client(redis_url, namespace=redis_ns)
    client.enqueue("tests.web.report", job_id="r1")
    replica = RedisStore(redis_url, redis_ns, lease=30.0)
    replica.serve(lambda: (1, ["tests.web.tick"]))
    try:
        assert replica.claim_due({"default": 10}, 30.0, "replica-a").claims == []
        web, _ = console_factory()
        overview = web.get(f"/api/ns/{redis_ns}/overview").json()
        assert overview["waiting"] == {"tests.web.report": 1}
        assert overview["serves"] == {"replica-a": ["tests.web.tick"]}
        assert "Waiting for a replica" in web.get(f"/ns/{redis_ns}/").text
        (row,) = web.get(f"/api/ns/{redis_ns}/jobs").json()["jobs"]
        why = "no live replica serves task 'tests.web.report'"
        assert row["waiting"].startswith(why) and "replica-a: tests.web.tick" in row["waiting"]
        page = web.get(f"/ns/{redis_ns}/job/r1").text
        assert 'id="waiting"' in page and why.replace("'", "&#39;") in page
        listing = web.get(f"/ns/{redis_ns}/jobs").text
        assert '<td class="state waiting"' in listing
    finally:
        replica.close()
        client.close()


def test_the_job_page_shows_a_runs_progress_and_redacts_it(console_factory, redis_url, redis_ns):
    """``current_invocation().progress(...)`` (stored by progress.lua) on the job page and
    its JSON, hidden with the arguments by ``--redact-args`` (docs/results.md)."""
    store = RedisStore(redis_url, redis_ns)
    Client(store).enqueue("tests.web.tick", job_id="busy")
    (c,) = store.claim_due({"default": 1}, 30.0, "r1").claims
    assert store.report_progress(c, '{"rows":42,"note":"<b>x</b>"}').value == "ok"
    web, _ = console_factory()
    page = web.get(f"/ns/{redis_ns}/job/busy").text
    shown = re.search(r'<td id="progress">(.*?)</td>', page, re.S)
    assert shown and "&#34;rows&#34;: 42" in shown.group(1) and "<b>" not in shown.group(1)
    assert f"invocation busy@{c.scheduled_ms}" in shown.group(1)
    row = web.get(f"/api/ns/{redis_ns}/job/busy").json()["job"]
    assert row["progress"]["value"] == {"rows": 42, "note": "<b>x</b>"}
    hidden, _ = console_factory(redact=True)
    assert "rows" not in hidden.get(f"/ns/{redis_ns}/job/busy").text
    assert hidden.get(f"/api/ns/{redis_ns}/job/busy").json()["job"]["progress"]["value"] == (
        "(redacted)"
    )
    store.close()
