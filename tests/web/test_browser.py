"""The web console in a real browser: headless Chromium (Debian's package, driven by
Playwright with ``executable_path``; never a downloaded browser) against a real
redis-server, three real replicas (``duetime run`` processes) and ``duetime web``
processes. Every page renders with data, every action shows its effect, the live tail
updates, and the refusals are shown: no token (read-only console) and a read-only Redis
user (deploy/users.acl's monitor rules).

Screenshots go to ``$DUETIME_SCREENSHOTS`` (default: duetime-screenshots in the temporary
folder), outside the
tree; tests/web/refresh_screenshots.py copies the ones the docs use to docs/img/.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from scheduler import Client, flow
from tests.faults.fleet import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("DUETIME_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(
    os.environ.get("DUETIME_SCREENSHOTS") or Path(tempfile.gettempdir()) / "duetime-screenshots"
)
NS = "shop"
TOKEN = "browser-test-token"
EVIL_ID = "<script>alert('pwned')</script>"
EVIL_ARGS = {"card": "<img src=x onerror=alert(1)>"}

if not Path(CHROMIUM).exists():
    pytest.skip(
        f"no Chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run does it), or set "
        "DUETIME_CHROMIUM",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
)
pytest.importorskip("starlette", reason="the web extra is not installed")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "DUETIME_WEB_TOKEN": ""}


def console(url: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """``duetime web`` on a free port; (process, base URL)."""
    argv = [sys.executable, "-m", "scheduler", "web", "--redis", url, "-n", NS, "--port", "0"]
    proc = subprocess.Popen([*argv, *extra], env=env(), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"(http://\S+/)", line)
    assert found, f"duetime web did not start: {line}"
    return proc, found.group(1).rstrip("/")


def stop(procs: list[subprocess.Popen[Any]]) -> None:
    """SIGTERM to all at once; whatever still runs after 3 s (a replica waiting for the
    slow job) is killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    wait_until(lambda: all(p.poll() is not None for p in procs), 3)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Redis, 3 replicas, jobs of every kind, and three consoles: ``act`` (actions, token),
    ``ro`` (read-only) and ``monitor`` (actions, but a read-only Redis user)."""
    from scheduler.embedded import EmbeddedRedis
    from tests.redis_fixtures import INSTALL_HINT, find_server, unavailable

    if find_server() is None:
        unavailable(f"no redis-server found: {INSTALL_HINT}")
    server = EmbeddedRedis().start()
    procs: list[subprocess.Popen[Any]] = []
    logs = tmp_path_factory.mktemp("replicas")
    try:
        url = server.url
        _monitor_user(server)
        for n in range(3):
            argv = [sys.executable, "-m", "scheduler", "run", "--redis", url, "-n", NS]
            argv += ["--import", "tests.web.tasks", "--workers", "2", "--resync", "0.5"]
            argv += ["--lease", "3"]  # a stop request arrives within a second
            with open(logs / f"r{n}.log", "wb") as out:
                procs.append(subprocess.Popen(argv, env=env(), stdout=out, stderr=out))
        client = Client(url, namespace=NS)
        _seed(client)
        token_file = logs / "token"
        token_file.write_text(TOKEN + "\n")
        act, act_url = console(
            url, "--actions", "--token-file", str(token_file), "--token-label", "ops-alice"
        )
        ro, ro_url = console(url)
        monitor = url.replace("redis://", "redis://duetime-monitor:monitor-pw@")
        mon, mon_url = console(monitor, "--actions", "--token-file", str(token_file))
        procs += [act, ro, mon]
        wait_until(lambda: len(client.list_jobs("dead").jobs) >= 2, 30)
        yield {"client": client, "act": act_url, "ro": ro_url, "monitor": mon_url}
        client.close()
    finally:
        stop(procs)
        server.stop()


def _monitor_user(server: Any) -> None:
    """deploy/users.acl's duetime-monitor, for this test's namespace."""
    import redis

    line = next(
        x
        for x in (ROOT / "deploy" / "users.acl").read_text().splitlines()
        if "duetime-monitor" in x
    )
    rules = [r for r in line.split()[2:] if not r.startswith(">")]
    rules = [r.replace("{demo}", "{" + NS + "}") for r in rules] + [">monitor-pw"]
    admin = redis.Redis.from_url(server.url)
    admin.execute_command("ACL", "SETUSER", "duetime-monitor", *rules)
    admin.close()


def _seed(client: Client) -> None:
    client.enqueue("tests.web.ok", every=2, job_id="tick")
    client.enqueue("tests.web.ok", cron="30 2 * * *", tz="Europe/Berlin", job_id="nightly")
    client.enqueue("tests.web.ok", kwargs=EVIL_ARGS, job_id=EVIL_ID, delay=3600)
    client.enqueue("tests.web.slow", kwargs={"seconds": 60}, job_id="slow-report", lane="default")
    client.enqueue("tests.web.boom", kwargs={"order": 1}, job_id="bad-1")
    client.enqueue("tests.web.boom", kwargs={"order": 2}, job_id="bad-2")
    client.enqueue_many(
        {"task": "tests.web.ok", "job_id": f"later-{n:03d}", "delay": 600 + n} for n in range(120)
    )
    client.set_limit("tenant:*", flow.limit(rate=1, per=86400))  # one start a day per tenant
    for n in range(3):  # tenant-1-0 runs; the other two are held by the rate for a day
        client.enqueue("tests.web.ok", job_id=f"tenant-1-{n}", limit_key="tenant:1")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = context.new_page()
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
    assert dialogs == [], f"a script ran in the page: {dialogs}"
    assert errors == [], f"JavaScript errors: {errors}"


def shot(pg: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def login(pg: Any, base: str) -> None:
    pg.goto(f"{base}/login")
    pg.fill("input[name=token]", TOKEN)
    pg.click("#login button")
    pg.wait_for_selector("#actor")


def test_read_pages_render_with_data(fleet, page):
    base = fleet["act"]
    page.goto(f"{base}/ns/{NS}/")
    page.wait_for_function(
        "document.getElementById('replicas-alive').textContent === '3'", timeout=30_000
    )
    page.wait_for_selector("#chart-throughput canvas")
    assert page.locator("#replicas tbody tr.alive").count() == 3
    assert int(page.inner_text("#queued")) >= 120
    shot(page, "overview")
    page.goto(f"{base}/ns/{NS}/jobs?state=scheduled")
    assert page.locator("#jobs tbody tr").count() == 50 and page.locator("#next-page").count() == 1
    page.click("#next-page")
    assert page.locator("#jobs tbody tr").count() >= 50
    page.goto(f"{base}/ns/{NS}/jobs?prefix=%3Cscript")
    assert page.locator("#jobs a.job").inner_text() == EVIL_ID  # shown as text
    assert "onerror=alert(1)" in page.inner_text("#jobs td.args")
    shot(page, "jobs")
    page.goto(f"{base}/ns/{NS}/job/{quote(EVIL_ID, safe='')}")
    assert page.inner_text("#job-id") == EVIL_ID
    page.goto(f"{base}/ns/{NS}/job/nightly")
    assert page.locator("#upcoming tbody tr").count() >= 10
    assert "Europe" in page.inner_text("#definition") or "+0" in page.inner_text("#upcoming")
    page.goto(f"{base}/ns/{NS}/job/tick")
    page.wait_for_selector("#runs tbody tr td.state.succeeded")
    shot(page, "job")
    page.goto(f"{base}/ns/{NS}/running")
    row = page.locator("#running-table tbody tr", has_text="slow-report")
    assert row.count() == 1 and re.search(r"\d+(\.\d)?s", row.inner_text())
    shot(page, "running")


def test_the_limits_page_and_a_held_job(fleet, page):
    """tenant:1's first job was claimed (its start counted for a day); it ran, or, a replica
    too slow to start it within the rate's 35 ms, was handed back and waits with the other
    two (docs/flow-control.md, Rate): 2 or 3 held."""
    base, client = fleet["ro"], fleet["client"]

    def settled() -> bool:
        (u,) = client.limit_usage()
        return (u.running, u.window_starts) == (0, 1) and u.held >= 2

    wait_until(settled, 30)
    held_now = str(client.limit_usage()[0].held)
    page.goto(f"{base}/ns/{NS}/")
    page.click("nav >> text=Limits")
    row = page.locator('#limits-table tbody tr[data-scope="tenant:*"]')
    assert row.locator("td.held").inner_text() == held_now
    assert row.locator("td").nth(1).inner_text() == "1 per 86400s"
    keys = page.inner_text('table.limit-keys[data-scope="tenant:*"]')
    row_text = rf"tenant:1\t0\t1\t{held_now}\t\S+\trate \(next start in (23h\d\dm|1d00h)\)"
    assert re.search(row_text, keys), keys
    shot(page, "limits")
    page.goto(f"{base}/ns/{NS}/job/tenant-1-2")
    held = page.inner_text("#held")
    assert re.fullmatch(
        r"limit tenant:\* \(rate 1 per 86400s: 1 started in the window; next start allowed in "
        r"(23 h \d+ min|1 d 0 h)\), due \S+ ago",
        held,
    ), held
    page.goto(f"{base}/ns/{NS}/job/tick")
    assert page.locator("#held").count() == 0  # no limit key: nothing holds it


def test_actions_show_their_effect(fleet, page):
    base, client = fleet["act"], fleet["client"]
    login(page, base)
    page.goto(f"{base}/ns/{NS}/failed")
    assert page.locator("#failed tbody tr").count() == 2
    assert "boom <b>not bold</b>" in page.inner_text("#failed")
    shot(page, "failed")
    page.check("input[name=job][value=bad-1]")
    page.click("#retry-selected")
    assert "bad-1: queued 1 run(s)" in page.inner_text("#flash")
    page.check("input[name=job][value=bad-2]")
    page.click("#delete-selected")
    assert "bad-2: deleted" in page.inner_text("#flash")
    page.goto(f"{base}/ns/{NS}/recurring")
    row = page.locator("#recurring tbody tr", has_text="tick")
    row.locator(".act-pause button").click()
    assert "tick: done" in page.inner_text("#flash") and client.get("tick").state == "paused"
    row = page.locator("#recurring tbody tr", has_text="tick")
    assert row.locator("td.state").inner_text() == "paused"
    shot(page, "recurring")
    row.locator(".act-resume button").click()
    assert client.get("tick").state != "paused"
    page.locator("#recurring tbody tr", has_text="nightly").locator(".act-trigger button").click()
    assert "nightly: done" in page.inner_text("#flash")
    page.goto(f"{base}/ns/{NS}/job/nightly")
    page.fill("#backfill input[name=start]", "2026-01-01T00:00:00Z")
    page.fill("#backfill input[name=end]", "2026-01-03T12:00:00Z")
    page.click("#backfill button")
    assert "nightly: queued 3 run(s)" in page.inner_text("#flash")
    page.goto(f"{base}/ns/{NS}/running")
    row = page.locator("#running-table tbody tr", has_text="slow-report")
    row.locator(".act-stop button").click()
    flash = page.inner_text("#flash")
    assert "slow-report: no run to come; asked 1 running invocation(s) to stop" in flash
    wait_until(lambda: not client.get("slow-report").running, 10)
    assert client.get("slow-report").state == "cancelled"
    page.goto(f"{base}/ns/{NS}/events?kind=operator")
    text = page.inner_text("#events-table")
    assert "retry by ops-alice (session)" in text and "backfill by ops-alice" in text
    assert "stop by ops-alice" in text


def test_the_live_tail_updates(fleet, page):
    base = fleet["act"]
    page.goto(f"{base}/ns/{NS}/events?kind=succeeded")
    before = page.locator("#events-table tbody tr").count()
    page.wait_for_selector("#events-table tbody tr.new", timeout=20_000)  # tick runs every 2 s
    assert page.locator("#events-table tbody tr").count() > before
    assert "updated" in page.inner_text("#tail-state")
    shot(page, "events")


def test_refusals_are_shown(fleet, page):
    page.goto(f"{fleet['ro']}/ns/{NS}/job/tick")
    assert page.inner_text("#readonly") == "read-only" and page.locator(".act-pause").count() == 0
    reply = page.request.post(f"{fleet['ro']}/ns/{NS}/act/pause", form={"job": "tick"})
    assert reply.status == 403 and "read-only" in reply.text()
    page.goto(f"{fleet['ro']}/login")
    assert "read-only" in page.inner_text("#no-login")
    shot(page, "read-only")
    page.goto(f"{fleet['act']}/login")
    page.fill("input[name=token]", "not-the-token")
    page.click("#login button")
    assert "not the console's token" in page.inner_text("#login-failed")
    base = fleet["monitor"]
    login(page, base)
    page.goto(f"{base}/ns/{NS}/job/tick")
    page.click(".act-pause button")
    assert "may not do this" in page.inner_text("#error")  # Redis refused the monitor user
    assert fleet["client"].get("tick").state != "paused"
    shot(page, "refused-by-redis")


def test_screenshots_are_outside_the_tree():
    assert not SHOTS.resolve().is_relative_to(ROOT)
    assert shutil.which  # the folder is an artifact: refresh_screenshots.py copies to docs/img
