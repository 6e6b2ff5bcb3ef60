"""An on-call operator's mistakes and odd terminals, each found by using the CLI as a
stranger would: a "more:" line that, pasted, listed another namespace; an event kind
typed wrong that matched nothing (and ``-f`` waited forever); a backfill of a job that
does not exist said there was nothing to backfill; a terminal that cannot show a job id
ended the command with exit 2; a one-off waiting for its retry was listed with no next
run."""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler import Client, RetryPolicy, Scheduler, task
from scheduler.cli import main, render
from scheduler.stores.redis import RedisStore
from scheduler.timeinput import iso_utc
from tests.helpers import WAIT

pytestmark = pytest.mark.redis
ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> object:
    return CliRunner().invoke(main, list(argv))


@task("tests.operator_day.fails")
def fails() -> None:
    raise RuntimeError("not yet")


def test_ls_shows_when_the_retry_of_a_one_off_is_due(redis_url, redis_ns):
    store = RedisStore(redis_url, redis_ns)
    engine = Scheduler(1, store=store)
    retry = RetryPolicy(max_attempts=3, backoff=600, max_backoff=600, jitter=0)
    job = engine.after("tests.operator_day.fails", 0, retry=retry)
    with Client(redis_url, namespace=redis_ns) as client:
        deadline = time.monotonic() + WAIT
        while client.get(job).last_error is None and time.monotonic() < deadline:
            time.sleep(0.02)
        engine.shutdown(wait=True, timeout=5)
        store.close()
        assert client.get(job).state == "scheduled"  # waiting for its retry: no occurrence
        [info] = client.list_jobs().jobs
    assert info.next_run is not None and 590 < info.next_run - time.time() <= 600
    listed = run("ls", "--redis", redis_url, "-n", redis_ns)
    [row] = [r for r in listed.stdout.splitlines() if r.startswith(job)]
    assert render.local(info.next_run) in row and re.search(r"\(in (9|10)m\d\ds\)", row), row


def test_the_more_line_of_ls_lists_the_same_namespace_when_pasted(redis_url, redis_ns):
    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue_many({"task": "t.x", "delay": 600 + n} for n in range(5))
    first = run("ls", "--redis", redis_url, "-n", redis_ns, "--limit", "2")
    more = first.stdout.splitlines()[-1]
    assert more.startswith(f"more: duetime ls -n {redis_ns} --limit 2 --state live --cursor ")
    argv = shlex.split(more.removeprefix("more: duetime "))
    second = run(*argv, "--redis", redis_url)
    assert second.exit_code == 0 and len(second.stdout.splitlines()) == 4  # header, 2, more


def test_an_event_kind_typed_wrong_is_refused(redis_url, redis_ns):
    result = run("events", "--redis", redis_url, "-n", redis_ns, "--kind", "claimd")
    assert result.exit_code == 2 and "'claimd' is not one of" in result.output
    assert run("events", "--redis", redis_url, "-n", redis_ns, "--kind", "claimed").exit_code == 0


def test_a_backfill_of_an_unknown_job_says_so(redis_url, redis_ns):
    window = ("--start", "2026-01-01T00:00Z", "--end", "2026-01-02T00:00Z")
    result = run("backfill", "nosuch", "--redis", redis_url, "-n", redis_ns, *window)
    assert result.exit_code == 1 and f"no job with id 'nosuch' in namespace '{redis_ns}'" in (
        result.output
    )
    reversed_window = ("--start", "2026-01-02T00:00Z", "--end", "2026-01-01T00:00Z")
    result = run("backfill", "nosuch", "--redis", redis_url, "-n", redis_ns, *reversed_window)
    assert result.exit_code == 2 and "must be after --start (2026-01-02T00:00Z)" in result.output


def test_a_backfill_says_its_window_and_that_the_runs_are_due_now(redis_url, redis_ns):
    hour = 3600
    top = int(time.time()) // hour * hour  # the hourly grid's last point
    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue("t.x", every=hour, anchor=top - 100 * hour, job_id="hourly")
        pending = client.get("hourly").next_run
    assert pending is not None and pending > top
    args = ("backfill", "hourly", "--redis", redis_url, "-n", redis_ns)
    past = run(*args, "--start", str(top - 5 * hour), "--end", str(top - hour))
    assert past.exit_code == 0, past.output
    assert "due now" not in past.stderr  # a bound of the window is not a due time
    assert re.search(r"--start \S+ read as .*\(5 h \d+ min ago\)$", past.stderr, re.M)
    window = f"[{iso_utc(top - 5 * hour)}, {iso_utc(top - hour)})"
    assert past.stdout == (
        f"queued 4 run(s) of job 'hourly', due now: its occurrences in {window} that never ran\n"
    )
    into_future = run(*args, "--start", str(top - hour), "--end", str(pending + 2 * hour))
    assert into_future.exit_code == 0, into_future.output
    assert "due now" not in into_future.stderr
    before = round((pending - (top - hour)) / hour)  # top - 1 h, top: none from pending on
    queued = f"queued {before} run(s) of job 'hourly', due now:"
    assert into_future.stdout.startswith(queued)
    assert f"; from its next occurrence ({iso_utc(pending)}) on, they run on schedule" in (
        into_future.stdout
    )


def test_a_terminal_that_cannot_show_a_job_id_gets_it_escaped(redis_url, redis_ns):
    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue("t.x", delay=600, job_id="café-☕")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "latin-1"}
    for argv in (["ls"], ["show", "café-☕"]):
        done = subprocess.run(
            [sys.executable, "-m", "scheduler", *argv, "--redis", redis_url, "-n", redis_ns],
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "caf\xe9-\\u2615".encode("latin-1") in done.stdout


def test_a_replica_with_no_task_registered_refuses_or_says_so(monkeypatch, caplog, capsys):
    """``duetime run`` without --import started silently; every job then failed as an
    unknown task, and kept retrying. Now it refuses (exit 2), or with --allow-no-tasks
    says so; any registered task counts, the demo's too (its replicas import it)."""
    from scheduler import tasks
    from scheduler.cli.taskmods import import_tasks

    monkeypatch.setattr(tasks, "_tasks", {})
    cases = (((), "no --import given"), (("json",), "the modules imported define none"))
    for modules, why in cases:
        with pytest.raises(SystemExit) as ended:
            import_tasks(modules, ())
        assert ended.value.code == 2
        assert capsys.readouterr().err.startswith(f"error: no task is registered ({why}): ")
    with caplog.at_level(logging.WARNING, logger="duetime"):
        import_tasks((), (), allow_none=True)
    assert [r.getMessage().split(": this replica")[0] for r in caplog.records] == [
        "no task is registered (no --import given; --allow-no-tasks)"
    ]
    caplog.clear()
    for registry in ({"shop.send": print}, {"duetime.demo.work": print}):
        monkeypatch.setattr(tasks, "_tasks", registry)
        with caplog.at_level(logging.WARNING, logger="duetime"):
            import_tasks((), ())
        assert caplog.records == []


def test_a_task_module_that_blocks_while_imported_is_named(monkeypatch, caplog, tmp_path) -> None:
    """A module that blocked while imported (a server started at import) left ``duetime
    run`` silent: no line said what it waited for. The import goes on; a warning names it."""
    import types

    from scheduler import tasks
    from scheduler.cli import taskmods

    monkeypatch.setattr(tasks, "_tasks", {})  # slow.t registers into a throwaway registry
    warned = threading.Event()
    said = taskmods._still_importing

    def still_importing(module: str) -> None:
        said(module)
        warned.set()

    gate = types.SimpleNamespace(warned=warned)  # the module waits until it was named
    monkeypatch.setitem(sys.modules, "slow_gate", gate)
    (tmp_path / "slow_tasks.py").write_text(
        "import slow_gate\nassert slow_gate.warned.wait(60)\n"
        "from scheduler import task\n@task('slow.t')\ndef t():\n    pass\n"
    )
    monkeypatch.setattr(taskmods, "SLOW_IMPORT_S", 0.01)
    monkeypatch.setattr(taskmods, "_still_importing", still_importing)
    monkeypatch.delitem(sys.modules, "slow_tasks", raising=False)
    with caplog.at_level(logging.WARNING, logger="duetime"):
        taskmods.import_tasks(("slow_tasks",), (str(tmp_path),))
    [record] = [r for r in caplog.records if "still importing" in r.getMessage()]
    assert record.getMessage().startswith("still importing slow_tasks after 0.01 s: ")


def test_a_retry_into_a_namespace_no_replica_serves_says_so(redis_url, redis_ns):
    """``duetime enqueue`` notes when no replica is alive to run the job; ``retry`` said
    nothing, and the retried work waited unseen."""
    from scheduler import RetryPolicy, Scheduler
    from scheduler.stores.redis import RedisStore
    from tests.faults.fleet import wait_until
    from tests.web import tasks  # noqa: F401  (registers tests.web.boom)

    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue("tests.web.boom", job_id="bad", retry=RetryPolicy(1))
        with Scheduler(1, store=RedisStore(redis_url, redis_ns), owner="gone") as engine:
            wait_until(lambda: len(client.list_jobs("dead").jobs) == 1, 20)
            engine.shutdown(wait=True)
    result = CliRunner().invoke(main, ["retry", "bad", "--redis", redis_url, "-n", redis_ns])
    assert result.exit_code == 0 and "retried job 'bad'" in result.stdout
    assert f"note: no replica is alive in namespace {redis_ns!r}" in result.stderr


def test_show_and_top_say_when_a_running_invocation_s_lease_expired(redis_url, redis_ns):
    """A job handed back at a replica's shutdown (or whose replica died) showed as running,
    "for 8m20s", with no replica alive and nothing to say it waits for the next claim."""
    import time

    from scheduler.cli.observe import _top_screen
    from scheduler.stores.redis import RedisStore

    store = RedisStore(redis_url, redis_ns)
    with Client(store) as client:
        client.enqueue("t.x", job_id="held")
        store.claim_due({"default": 1}, 30, "alive")
        client.enqueue("t.x", job_id="dropped")
        store.claim_due({"default": 1}, 0.001, "gone")
        time.sleep(0.01)  # past the 1 ms lease (no signal: time itself)
        held = run("show", "held", "--redis", redis_url, "-n", redis_ns).stdout
        dropped = run("show", "dropped", "--redis", redis_url, "-n", redis_ns).stdout
        print(held)
        assert "s left" in held and "expired" not in held
        assert "lease expired" in dropped and "the next claim of any replica runs it" in dropped
        screen = _top_screen(store, redis_ns)
        assert "LEASE" in screen and "expired" in screen.split("dropped", 1)[1].splitlines()[0]


def test_trigger_says_nothing_of_interrupting_the_run_it_started(redis_url, redis_ns):
    """``duetime trigger`` of an idle recurring job said "1 running invocation(s) may
    finish (--interrupt stops them)": the run it had just started, and an option trigger
    does not have."""
    from scheduler.stores.redis import RedisStore

    store = RedisStore(redis_url, redis_ns)
    with Client(store) as client:
        client.enqueue("t.x", every=3600, job_id="r")
        store.claim_due({"default": 1}, 30, "o")  # none due: the trigger's run is claimed below
        result = run("trigger", "r", "--redis", redis_url, "-n", redis_ns)
        assert result.exit_code == 0 and result.stdout.startswith("triggered a run of job 'r'")
        store.claim_due({"default": 1}, 30, "o")
        result = run("trigger", "r", "--redis", redis_url, "-n", redis_ns)
        assert result.exit_code == 0 and "--interrupt" not in result.output
        result = run("pause", "r", "--redis", redis_url, "-n", redis_ns)
        assert "1 running invocation(s) may finish" in result.stdout
        assert "--interrupt" not in result.output


def test_a_user_refused_the_namespace_s_keys_is_told_so(redis_url, redis_ns, redis_client):
    """A key pattern the ACL user lacks read "may not run '?'"."""
    user = f"u-{redis_ns}"
    redis_client.execute_command(
        "ACL", "SETUSER", user, "on", ">pw", "~other:*", "+@all", "-@dangerous", "+info"
    )
    try:
        url = redis_url.replace("redis://", f"redis://{user}:pw@")
        result = run("ls", "--redis", url, "-n", redis_ns)
        assert result.exit_code == 3, result.output
        assert f"Redis user '{user}' may not read or write this namespace's keys" in (result.output)
        assert "'?'" not in result.output
    finally:
        redis_client.execute_command("ACL", "DELUSER", user)


def test_top_waits_out_a_redis_that_stops_answering(redis_url, redis_ns, monkeypatch):
    """``duetime top`` ended with exit 3 at a single ~1 s stall of Redis; a live view now
    says so on its screen and asks again each interval (with --iterations it still ends)."""
    import time

    from scheduler.cli import observe

    real, answers = observe._top_screen, iter([False, False, True])

    def flaky(store, namespace):
        if not next(answers):
            raise ConnectionError("Error 111 connecting: Connection refused.")
        return real(store, namespace)

    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt  # Ctrl-C

    monkeypatch.setattr(observe, "_top_screen", flaky)
    monkeypatch.setattr(time, "sleep", sleep)
    result = run("top", "--redis", redis_url, "-n", redis_ns)
    assert result.exit_code == 0, result.output
    assert result.output.count("Redis does not answer since") == 2
    assert "replicas 0   running 0" in result.output.split("does not answer")[-1]  # back
    answers = iter([False])
    result = run("top", "--redis", redis_url, "-n", redis_ns, "--iterations", "1")
    assert result.exit_code == 3 and "Connection refused" in result.output


def test_empty_quarantine_and_empty_namespace_purges_say_so(redis_url, redis_ns):
    """``quarantine purge --all --yes`` of an empty quarantine said "no entry None";
    ``purge NS --dry-run`` of an empty namespace said "would delete 0 key(s)" with none of
    the hints the real purge gives."""
    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue("t.x", delay=600)
    result = run("quarantine", "purge", "--all", "--yes", "--redis", redis_url, "-n", redis_ns)
    assert result.exit_code == 1 and "None" not in result.output
    assert f"the quarantine of {redis_ns!r} is empty" in result.output
    typo = redis_ns[:-1]
    result = run("purge", typo, "--dry-run", "--redis", redis_url)
    assert result.exit_code == 0 and f"did you mean {redis_ns!r}?" in result.output
