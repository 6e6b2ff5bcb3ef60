"""The inspection commands of ``duetime`` (ls, show, stats, events, cancel, pause, resume)
over a real Redis namespace: text, ``--json``, exit codes 0/1/2/3 and ``--help``."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from scheduler import Client, Scheduler, task
from scheduler.cli import main, render
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.reading import queries
from tests.helpers import WAIT

pytestmark = pytest.mark.redis

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNREACHABLE = "redis://127.0.0.1:1/0"
NEW_COMMANDS = [
    "ls",
    "show",
    "stats",
    "events",
    "cancel",
    "pause",
    "resume",
    "trigger",
    "top",
    "backfill",
    "doctor",
    "quarantine",
    "retry",
    "delete",
    "purge",
    "web",
    "limit",
    "libraries",
]
LIVE = ["overdue", "soon", "later", "tick", "held"]  # ls order: by next run, paused last


@task("tests.cli.ok")
def ok() -> dict[str, int]:
    return {"n": 1}


@task("tests.cli.boom")
def boom() -> None:
    raise ValueError("boom")


@pytest.fixture(scope="module")
def ns(redis_server) -> str:
    """One namespace for the read-only tests: two finished jobs (one failed, dead-lettered),
    an overdue one-off, two future one-offs, a recurring, a paused and a cancelled job."""
    url, name = redis_server.url, f"cli{time.time_ns() % 10**9}"
    store = RedisStore(url, name, resync=30)
    engine = Scheduler(1, store=store)
    engine.after("tests.cli.ok", 0, job_id="done-ok")
    engine.after("tests.cli.boom", 0, job_id="done-boom")
    assert engine.wait_idle(5)
    engine.shutdown(wait=True, timeout=5)  # a clean stop: it leaves the live replicas
    assert store.claim_due({}, 30.0, "replica-1").claims == []  # one that is still alive
    store.close()
    with Client(url, namespace=name) as c:
        for job in ("done-ok", "done-boom"):  # the engine's commits may trail wait_idle
            for _ in range(100):
                if c.get(job).state != "scheduled":
                    break
                time.sleep(0.02)
        c.enqueue("tests.cli.ok", at=time.time() - 10, job_id="overdue")
        c.enqueue("tests.cli.ok", delay=30, job_id="soon")
        c.enqueue("tests.cli.ok", delay=60, job_id="later")
        c.enqueue("tests.cli.ok", every=3600, job_id="tick")
        c.enqueue("tests.cli.ok", delay=120, job_id="held")
        assert c.pause("held")
        c.enqueue("tests.cli.ok", delay=90, job_id="gone")
        assert c.cancel("gone")
    return name


@pytest.fixture
def cli(redis_server, ns):
    """Invoke ``duetime`` in-process with --redis/--namespace given by the environment."""
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str | None] | None = None):
        base = {"DUETIME_REDIS_URL": redis_server.url, "DUETIME_NAMESPACE": ns}
        return runner.invoke(main, list(args), env={**base, **(env or {})})

    return invoke


@pytest.fixture
def client(redis_server, ns):
    with Client(redis_server.url, namespace=ns) as c:
        yield c


def epoch(iso_text: str) -> float:
    return dt.datetime.fromisoformat(iso_text).timestamp()


# ---- ls -------------------------------------------------------------------------------------


def test_ls_lists_live_jobs_by_next_run(cli, client):
    r = cli("ls")
    assert r.exit_code == 0, r.output
    header, *rows = r.stdout.splitlines()
    assert header.split()[:7] == ["ID", "TASK", "ARGS", "SCHEDULE", "LANE", "STATE", "NEXT"]
    assert [row.split()[0] for row in rows] == LIVE
    by_id = {row.split()[0]: row for row in rows}
    assert re.search(r"\(\d+\.\ds ago\)", by_id["overdue"])
    assert re.search(r"\(in [23]\d\.\ds\)", by_id["soon"])
    assert re.search(r"\(in 59m\d\ds\)", by_id["tick"]) and "every 3600s" in by_id["tick"]
    assert "paused" in by_id["held"]
    assert render.local(client.get("soon").next_run) in by_id["soon"]


def test_ls_that_finds_nothing_names_its_filter(cli, client, ns):
    """It said "no live jobs in namespace" of a namespace with live jobs: none of the task."""
    r = cli("ls", "--task", "nosuch")
    assert r.exit_code == 0 and r.stdout == f"no live jobs of task 'nosuch' in namespace {ns!r}\n"


def test_ls_json_matches_client_jobs(cli, client):
    r = cli("ls", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)["jobs"]
    infos = {i.job_id: i for i in client.jobs()}
    assert [d["job_id"] for d in data] == LIVE and set(infos) == set(LIVE)
    for d in data:
        info = infos[d["job_id"]]
        for field in (
            "schedule",
            "lane",
            "state",
            "next_run",
            "runs",
            "failures",
            "attempts",
            "last_error",
        ):
            assert d[field] == getattr(info, field), field
        if info.next_run is not None:
            assert epoch(d["next_run_iso"]) == pytest.approx(info.next_run, abs=0.001)
    assert infos["held"].state == "paused" and data[-1]["next_run"] is None


# ---- show -----------------------------------------------------------------------------------


def test_show_a_failed_job_with_its_dead_letter_and_events(cli, client):
    r = cli("show", "done-boom")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert re.search(r"^state\s+failed$", out, re.M)
    assert re.search(r"^last error\s+ValueError: boom", out, re.M)
    assert re.search(r"^dead letters \(recent first\)\n  .*attempt 1: ValueError: boom", out, re.M)
    events = out.split("events ", 1)[1].splitlines()[1:]
    kinds = [line.split()[1] for line in events]
    assert kinds[0] == "scheduled" and "claimed" in kinds and "dead_lettered" in kinds
    assert all(line.split()[2] == "done-boom" for line in events)


def test_show_json_has_every_field_and_the_jobs_events(cli, client):
    r = cli("show", "done-ok", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    info = client.get("done-ok")
    assert d["state"] == info.state == "succeeded"
    assert d["last_result"] == info.last_result == {"n": 1}
    assert d["runs"] == info.runs == 1 and d["next_run"] is None
    assert d["running"] == [] and d["skipped"] == [] and d["dead_letters"] == []
    assert {e["job_id"] for e in d["events"]} == {"done-ok"}
    assert [e["kind"] for e in d["events"]][:2] == ["scheduled", "claimed"]
    assert epoch(d["events"][0]["at_iso"]) == pytest.approx(d["events"][0]["at"], abs=0.001)
    boom = json.loads(cli("show", "done-boom", "--json").stdout)
    assert [x["detail"] for x in boom["dead_letters"]] == [
        e.detail for e in client.get("done-boom").dead_letters
    ]


def test_show_of_an_unknown_job_exits_1_and_a_bad_id_exits_2(cli):
    r = cli("show", "no-such-job")
    assert r.exit_code == 1 and "no job with id 'no-such-job'" in r.stderr
    assert cli("show", "bad\nid").exit_code == 2


# ---- cancel / pause / resume ----------------------------------------------------------------


def test_cancel_pause_resume_exit_0_when_they_take_effect_else_1(redis_server):
    ns = f"cli{time.time_ns() % 10**9}s"
    runner = CliRunner(env={"DUETIME_REDIS_URL": redis_server.url, "DUETIME_NAMESPACE": ns})
    with Client(redis_server.url, namespace=ns) as c:
        c.enqueue("tests.cli.ok", delay=60, job_id="a")

        def run(*args: str) -> tuple[int, str]:
            r = runner.invoke(main, list(args))
            return r.exit_code, r.output.strip()

        assert run("pause", "a") == (0, "paused job 'a'")
        assert c.get("a").state == "paused"
        assert run("pause", "a") == (1, "nothing to pause: job 'a' is already paused")
        code, text = run("resume", "a")
        assert code == 0 and re.fullmatch(r"resumed job 'a', next run .* \(in \d+\.\ds\)", text)
        assert c.get("a").state == "scheduled"
        assert run("resume", "a") == (
            1,
            "nothing to resume: job 'a' is not paused (it is scheduled)",
        )
        assert run("cancel", "a") == (0, "cancelled job 'a'")
        assert c.get("a").state == "cancelled"
        assert run("cancel", "a") == (1, "nothing to cancel: job 'a' is cancelled")
        assert run("pause", "a") == (1, "nothing to pause: job 'a' is cancelled")
        for verb in ("cancel", "pause", "resume"):
            assert run(verb, "nope") == (1, f"error: no job with id 'nope' in namespace '{ns}'")


# ---- stats ----------------------------------------------------------------------------------


def test_stats_json_counts_the_queue_running_counters_and_replicas(cli, redis_server, ns):
    r = cli("stats", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # pending: overdue, soon, later, tick (held is paused: out of the due set; gone: cancelled)
    assert d["queue_depths"] == {"default": 4} and d["due_now"] == {"default": 1}
    assert d["running"] == 0 and d["data_loss_alarms"] == 0
    assert d["now"] == pytest.approx(time.time(), abs=5)
    store = RedisStore(redis_server.url, ns)
    try:
        kinds = collections.Counter(e.kind for e in store.events(100_000))
    finally:
        store.close()
    assert d["counters"] == dict(sorted(kinds.items()))
    assert d["replicas_alive"] == len(d["replicas"]) == 1  # the fixture's "replica-1"
    assert d["replicas"][0]["id"] == "replica-1"
    assert d["replicas"][0]["last_claim"] == pytest.approx(time.time(), abs=60)


def test_stats_text(cli, ns):
    r = cli("stats")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert f"namespace   {ns} at redis://" in out
    assert re.search(r"^LANE\s+QUEUED\s+DUE NOW\ndefault\s+4\s+1$", out, re.M)
    assert re.search(r"^running\s+0$", out, re.M)
    assert re.search(r"^replicas\s+1 alive: \S+ \(last claim .* ago\)$", out, re.M)
    assert re.search(r"^data loss\s+0 alarm\(s\)$", out, re.M)
    assert re.search(r"^  scheduled\s+8$", out, re.M)  # 8 jobs were enqueued


# ---- events ---------------------------------------------------------------------------------


def test_events_last_n_oldest_first_and_by_job(cli, client):
    r = cli("events", "--count", "3", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [(e["kind"], e["job_id"], e["at"]) for e in data] == [
        (e.kind, e.job_id, e.at) for e in client.events(3)
    ]
    lines = cli("events", "-c", "3").stdout.splitlines()
    assert [line.split()[1:3] for line in lines] == [[e.kind, e.job_id] for e in client.events(3)]
    tick = json.loads(cli("events", "--job", "tick", "--json").stdout)
    assert [(e["kind"], e["job_id"]) for e in tick] == [("scheduled", "tick")]
    assert tick[0]["scheduled"] == client.get("tick").next_run
    everything = client.events(100_000)
    assert len(json.loads(cli("events", "--json").stdout)) == min(20, len(everything))


def test_events_that_find_nothing_say_so_and_name_the_namespaces_here(cli, client, ns):
    """A mistyped namespace (``-n`` is --namespace, not a count) printed nothing, exit 0."""
    typo = ns[:-1]
    r = cli("events", "-n", typo)
    assert r.exit_code == 0 and r.stdout == ""
    assert f"no events in namespace {typo!r}" in r.stderr and f"did you mean {ns!r}" in r.stderr
    r = cli("events", "--job", "nope", "--json")
    assert json.loads(r.stdout) == [] and "no events of job 'nope' in namespace" in r.stderr
    assert "no events of kind quarantined" in cli("events", "--kind", "quarantined").stderr
    assert cli("events", "--count", "0").stderr == ""  # none asked, none said


def test_follow_yields_an_event_added_after_it_started(redis_server, redis_ns):
    ns = redis_ns
    store = RedisStore(redis_server.url, ns)
    try:
        tail = queries.follow(store, block=0.1, limit=1, timeout=3, job_id="fresh")
        with Client(redis_server.url, namespace=ns) as c:
            c.enqueue("tests.cli.ok", delay=3600, job_id="noise")
            c.enqueue("tests.cli.ok", delay=3600, job_id="fresh")
            c.cancel("noise")
            c.cancel("fresh")
        got = list(tail)
        assert [(e.event.kind, e.event.job_id) for e in got] == [("scheduled", "fresh")]
        # nothing new: it stops at its timeout (a follow that ignored it would wait for
        # an event that never comes; WAIT, not a guess at this box's speed, bounds it)
        got = []
        quiet = threading.Thread(
            target=lambda: got.extend(queries.follow(store, block=0.1, timeout=0.3))
        )
        quiet.start()
        quiet.join(WAIT)
        assert not quiet.is_alive() and got == []
    finally:
        store.close()


def test_follow_blocks_within_the_clients_read_timeout(redis_server, redis_ns):
    """A quiet namespace followed through a client whose reads time out sooner than
    follow's block (duetime events -f with --redis-timeout at or below 5 s): it waits,
    it does not fail as if Redis had stopped answering."""
    import redis

    client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=0.3)
    store = RedisStore(client, redis_ns)
    try:
        assert list(queries.follow(store, timeout=0.8)) == []  # block 5.0 by default
    finally:
        store.close()
        client.close()


def test_events_follow_json_prints_one_object_per_line(cli, redis_server, redis_ns, monkeypatch):
    ns = redis_ns
    started = threading.Event()
    real = queries.follow

    def bounded(store, **kw):  # the command's own follow, stopped after one event
        it = real(store, block=0.1, limit=1, timeout=3, **kw)
        started.set()
        return it

    monkeypatch.setattr(queries, "follow", bounded)

    def produce() -> None:
        assert started.wait(3)
        with Client(redis_server.url, namespace=ns) as c:
            c.enqueue("tests.cli.ok", delay=3600, job_id="followed")
            c.cancel("followed")

    producer = threading.Thread(target=produce)
    producer.start()
    r = cli("events", "-n", ns, "--follow", "--json", "--count", "1", "--job", "followed")
    producer.join()
    assert r.exit_code == 0, r.output
    (line,) = r.stdout.splitlines()
    assert json.loads(line)["kind"] == "scheduled" and json.loads(line)["job_id"] == "followed"


# ---- usage, unreachable Redis, help, the entry point ----------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["show", "x"],
        ["stats"],
        ["events"],
        ["cancel", "x"],
        ["pause", "x"],
        ["resume", "x"],
    ],
)
def test_exit_codes_without_a_url_and_with_an_unreachable_redis(cli, args):
    r = cli(*args, env={"DUETIME_REDIS_URL": None})
    assert r.exit_code == 2 and "needs --redis URL" in r.output
    r = cli(*args, "--redis", "redis://user:s3cret@127.0.0.1:1/0")
    assert r.exit_code == 3, r.output
    assert "error: cannot reach Redis at redis://user:***@127.0.0.1:1/0" in r.stderr
    assert "s3cret" not in r.output and "Traceback" not in r.output


def test_help_for_every_command():
    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0
    assert set(main.commands) == {"run", "enqueue", "demo", *NEW_COMMANDS}  # none forgotten
    for name in ["run", "enqueue", "demo", *NEW_COMMANDS]:
        assert re.search(rf"^  {name}\s+\w", top.output, re.M), name  # a one-line summary
        r = runner.invoke(main, [name, "--help"])
        assert r.exit_code == 0 and r.output.startswith("Usage: "), name
        if name in NEW_COMMANDS and name not in ("quarantine", "limit", "libraries"):  # groups
            assert "--redis URL" in r.output
            assert ("NAMESPACE" if name == "purge" else "--namespace") in r.output
    for sub in ("ls", "load", "prune"):  # server-wide: no namespace
        assert "--redis URL" in runner.invoke(main, ["libraries", sub, "--help"]).output
    assert "--follow" in runner.invoke(main, ["events", "--help"]).output


def test_libraries_prune_deletes_other_versions_and_nothing_else(private_redis):
    """A library named duetime_ by hand was deleted too, and listed as another version's."""
    import redis

    r = redis.Redis.from_url(private_redis.url, decode_responses=True)
    fn = "redis.register_function('{0}_f', function() return 1 end)"
    for name in ("duetime_custom", "duetime_add_0123456789abcdef"):  # a user's; an old version's
        r.function_load(f"#!lua name={name}\n" + fn.format(name))
    url = ["--redis", private_redis.url]
    listed = CliRunner().invoke(main, ["libraries", "ls", *url]).output
    assert "duetime_add_0123456789abcdef  another version's" in listed and "custom" not in listed
    assert CliRunner().invoke(main, ["libraries", "prune", *url]).output == "1 deleted\n"
    left = [dict(zip(lib[::2], lib[1::2], strict=True)) for lib in r.function_list()]
    assert [lib["library_name"] for lib in left] == ["duetime_custom"]
    r.close()


def test_python_dash_m_scheduler_ls(redis_server, ns):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler",
            "ls",
            "--redis",
            redis_server.url,
            "--namespace",
            ns,
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert [d["job_id"] for d in json.loads(out.stdout)["jobs"]] == LIVE
    bad = subprocess.run(
        [sys.executable, "-m", "scheduler", "ls", "--redis", UNREACHABLE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=30,
    )
    assert bad.returncode == 3 and "cannot reach Redis" in bad.stderr


def test_trigger_runs_a_job_now_and_says_so(redis_url, redis_ns):
    from click.testing import CliRunner

    from scheduler import Client
    from scheduler.cli import main

    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue("tests.noop", every=3600, job_id="report")
        out = CliRunner().invoke(main, ["trigger", "report", "--redis", redis_url, "-n", redis_ns])
        assert out.exit_code == 0 and "triggered a run of job 'report'" in out.output
        assert [e.kind for e in client.events(50)][-1] == "triggered"
        missing = CliRunner().invoke(
            main, ["trigger", "nope", "--redis", redis_url, "-n", redis_ns]
        )
        assert missing.exit_code == 1


def test_stats_reports_lag_percentiles_of_recent_claims(redis_url, redis_ns):
    import tests.helpers  # noqa: F401  (registers tests.noop)
    from scheduler import Scheduler
    from scheduler.stores.redis import RedisStore

    store = RedisStore(redis_url, redis_ns)
    began = time.time()
    with Scheduler(1, store=store) as engine:
        for _ in range(5):
            engine.after("tests.noop", 0)
        assert engine.wait_idle(5)
    took = (time.time() - began) * 1000  # no lag can exceed it (+2 ms: whole-ms readings)
    lag = queries.stats(store)["lag_ms"]
    assert lag["samples"] == 5 and 0 <= lag["p50"] <= lag["p99"] <= lag["max"] <= took + 2
    store.close()


def test_top_shows_running_invocations(redis_url, redis_ns):
    import threading

    from click.testing import CliRunner

    from scheduler import Scheduler, current_invocation, task
    from scheduler.cli import main
    from scheduler.stores.redis import RedisStore

    started, release = threading.Event(), threading.Event()

    @task("tests.cli.block")
    def block() -> None:
        started.set()
        current_invocation().token.wait(5) if not release.wait(5) else None

    with Scheduler(1, store=RedisStore(redis_url, redis_ns)) as engine:
        engine.after("tests.cli.block", 0, job_id="blocker")
        assert started.wait(5)
        out = CliRunner().invoke(
            main, ["top", "--redis", redis_url, "-n", redis_ns, "--iterations", "1"]
        )
        release.set()
    assert out.exit_code == 0, out.output
    assert "RUNNING JOB" in out.output and "blocker" in out.output
    assert "replicas 1" in out.output


def test_enqueue_command(redis_url, redis_ns):
    from scheduler import Client

    runner = CliRunner()
    base = ["enqueue", "--redis", redis_url, "-n", redis_ns]
    out = runner.invoke(
        main,
        [
            *base,
            "billing.report",
            "--every",
            "60",
            "--anchor",
            "0",
            "--id",
            "hourly",
            "--kwargs",
            '{"region": "eu"}',
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"job_id": "hourly"}  # stderr: the --anchor echo
    once = runner.invoke(main, [*base, "billing.report", "--in", "30"])
    assert once.exit_code == 0 and once.stdout.strip()
    with Client(redis_url, namespace=redis_ns) as client:
        info = client.get("hourly")
        assert info.schedule == "every 60s from 1970-01-01T00:00:00Z" and info.state == "scheduled"
        assert client.get(once.stdout.strip()).schedule == "once after 30s"
        # --delay, Client.enqueue's name for it (was "No such option ... Did you mean --help?")
        same = runner.invoke(main, [*base, "billing.report", "--delay", "1m"])
        assert same.exit_code == 0, same.output
        assert client.get(same.stdout.strip()).schedule == "once after 60s"
    assert runner.invoke(main, [*base, "x", "--kwargs", "{not json"]).exit_code == 2
    assert runner.invoke(main, [*base, "x", "--in", "-1"]).exit_code == 2
    assert runner.invoke(main, [*base, "x", "--in", "1", "--every", "2"]).exit_code == 2


def test_enqueue_takes_every_job_option_as_the_client_does(redis_url, redis_ns):
    """The same options through `duetime enqueue` and `Client.enqueue` store the same
    definition (the CLI's flags come from specs.JOB_OPTIONS)."""
    from scheduler import Client
    from scheduler.model import RetryPolicy

    flags = [
        *("--lane", "reports", "--job-timeout", "90s"),
        *("--retry", '{"max_attempts": 4, "backoff": 2, "max_stalls": 2}'),
        *("--misfire", "catch_up", "--misfire-grace", "5s", "--catch-up-window", "1h"),
        *("--overlap", "queue", "--delivery", "at_most_once"),
    ]
    base = ["enqueue", "--redis", redis_url, "-n", redis_ns, "billing.report", "--every", "60"]
    out = CliRunner().invoke(main, [*base, "--anchor", "0", "--id", "by-cli", *flags])
    assert out.exit_code == 0, out.output
    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue(
            "billing.report",
            every=60,
            anchor=0,
            job_id="by-python",
            lane="reports",
            timeout=90,
            retry=RetryPolicy(max_attempts=4, backoff=2, max_stalls=2),
            misfire="catch_up",
            misfire_grace=5,
            catch_up_window=3600,
            overlap="queue",
            delivery="at_most_once",
        )
        by_cli, by_python = (queries.definition(client.store, j) for j in ("by-cli", "by-python"))
    assert by_cli is not None and by_cli.lane == "reports" and by_cli.timeout == 90
    assert by_cli == dataclasses.replace(by_python, job_id="by-cli")
