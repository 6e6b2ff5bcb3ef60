"""Issue 13's error matrix: every subcommand against every failure class ends with one
line on stderr that says what to do and the documented exit code, never a traceback:
unreachable (3), a server that never answers (3, within --redis-timeout plus a second),
WRONGPASS (3), NOPERM (3, naming the user and the refused command), the `redis` extra
missing (2), bad input (2); and for `run`: a task module that cannot be imported (2), a
metrics port in use (2)."""

from __future__ import annotations

import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from scheduler.cli import main

pytestmark = pytest.mark.redis

COMMANDS = {
    "ls": [],
    "show": ["j"],
    "stats": [],
    "events": [],
    "top": ["--iterations", "1"],
    "cancel": ["j"],
    "pause": ["j"],
    "resume": ["j"],
    "trigger": ["j"],
    "backfill": ["j", "--start", "0", "--end", "10"],
    "enqueue": ["tests.noop", "--in", "5"],
    "doctor": [],
    "quarantine ls": [],
    "quarantine show": ["j"],
    "quarantine restore": ["j"],
    "quarantine purge": ["j"],
    "retry": ["j"],
    "retry --failed": ["--failed", "--dry-run"],
    "delete": ["j"],
    "purge": ["--yes"],  # NAMESPACE: added in the test
    "run": ["--workers", "1", "--import", "tests.helpers"],
    "demo": [],
}
CLASSES = ["unreachable", "silent", "wrongpass", "noperm", "no-extra", "bad-namespace"]


@pytest.fixture(scope="module")
def silent_url() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"redis://127.0.0.1:{srv.getsockname()[1]}/0"
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


@pytest.fixture(scope="module")
def users(redis_server) -> Iterator[dict[str, str]]:
    """Two ACL users on the test server: one that may only PING, one with a password."""
    import redis

    admin = redis.Redis.from_url(redis_server.url)
    tag = uuid.uuid4().hex[:8]
    limited, locked = f"limited-{tag}", f"locked-{tag}"
    admin.execute_command("ACL", "SETUSER", limited, "on", ">pw", "~*", "&*", "+ping")
    admin.execute_command("ACL", "SETUSER", locked, "on", ">right", "~*", "&*", "+@all")
    host = redis_server.url.split("://", 1)[1]
    yield {
        "noperm": f"redis://{limited}:pw@{host}",
        "wrongpass": f"redis://{locked}:wrong@{host}",
        "limited": limited,
    }
    admin.execute_command("ACL", "DELUSER", limited, locked)
    admin.close()


def invoke(command: str, url: str | None, extra: list[str], monkeypatch=None, ns="errs"):
    args = [*command.split(), *extra]
    env = {"DUETIME_NAMESPACE": ns, "DUETIME_TIMEOUT": "0.5"}
    if url is not None:
        env["DUETIME_REDIS_URL"] = url
    return CliRunner().invoke(main, args, env=env)


@pytest.mark.parametrize("failure", CLASSES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_fails_with_one_line_and_its_exit_code(
    command, failure, silent_url, users, redis_server, monkeypatch
):
    extra = COMMANDS[command]
    url = {
        "unreachable": "redis://127.0.0.1:1/0",
        "silent": silent_url,
        "wrongpass": users["wrongpass"],
        "noperm": users["noperm"],
        "no-extra": redis_server.url,
        "bad-namespace": redis_server.url,
    }[failure]
    if failure == "no-extra":
        monkeypatch.setitem(sys.modules, "redis", None)  # as if duetime[redis] were missing
    if command == "demo":
        if failure == "bad-namespace":
            pytest.skip("demo picks a namespace of its own")
        extra = ["--redis", url, "--seconds", "1"]
    if command == "purge":
        extra = ["bad ns" if failure == "bad-namespace" else "errs", *extra]
    t0 = time.monotonic()
    result = invoke(command, url, extra, ns="bad ns" if failure == "bad-namespace" else "errs")
    took = time.monotonic() - t0
    out = result.output
    assert "Traceback" not in out, out
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), repr(result.exception)
    expected = 2 if failure in ("no-extra", "bad-namespace") else 3
    assert result.exit_code == expected, (failure, out)
    errors = [line for line in out.splitlines() if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1, out
    line = errors[0]
    if failure == "silent":
        assert took < 0.5 + 1.0 + 1.0, took  # the timeout plus a second (+ CI slack)
        assert "did not answer within 0.5s" in line or "Timeout" in line, line
    if failure == "noperm":
        assert users["limited"] in line and "may not run" in line, line
    if failure == "wrongpass":
        assert "refused the credentials" in line, line
    if failure == "no-extra":
        assert "pip install 'redis[hiredis]>=5.0.2'" in line, line


def test_run_imports_from_the_working_directory_and_from_path(tmp_path, redis_server, monkeypatch):
    """`duetime run --import myapp.tasks` from the folder that holds myapp/ (no
    PYTHONPATH), and --path DIR; an unimportable module is one line, exit 2."""
    pkg = tmp_path / "myapp_cli_errs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tasks.py").write_text("raise RuntimeError('imported, then failed')\n")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    env = {"DUETIME_REDIS_URL": redis_server.url, "DUETIME_NAMESPACE": "errs"}
    r = runner.invoke(main, ["run", "--import", "myapp_cli_errs.tasks"], env=env)
    assert r.exit_code == 2 and "imported, then failed" in r.output  # it was found
    monkeypatch.chdir("/")
    r = runner.invoke(main, ["run", "--import", "nope_cli_errs.tasks"], env=env)
    assert r.exit_code == 2 and "cannot import task module 'nope_cli_errs.tasks'" in r.output
    assert "Traceback" not in r.output
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "pathmod_cli_errs.py").write_text(
        "from scheduler import task\n\n\n@task('pathmod_cli_errs.x')\ndef x() -> None:\n    pass\n"
    )
    r = runner.invoke(
        main,
        [
            "run",
            "--path",
            str(tmp_path / "elsewhere"),
            "--import",
            "pathmod_cli_errs",
            "--redis",
            "redis://127.0.0.1:1/0",
        ],
        env=env,
    )
    assert r.exit_code == 3, r.output  # imported, then the (unreachable) server refused


def test_a_task_module_that_fails_is_told_apart_from_one_not_found(
    tmp_path, redis_server, monkeypatch
):
    """A module that was found but raised while it was imported was reported as "cannot
    import ...; run from the folder that holds it, or pass --path DIR": the wrong advice.
    Now the line says what it raised and where; a file name or a list gets its own hint."""
    (tmp_path / "keyerr_cli.py").write_text("import os\n\nos.environ['DUETIME_NOPE_X']\n")
    (tmp_path / "syntax_cli.py").write_text("def f(:\n")
    (tmp_path / "dep_cli.py").write_text("import nosuchdependency_cli\n")
    (tmp_path / "fine_cli.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    env = {"DUETIME_REDIS_URL": redis_server.url, "DUETIME_NAMESPACE": "errs"}
    expected = {
        "keyerr_cli": f"raised KeyError at {tmp_path / 'keyerr_cli.py'}:3 while it was "
        "imported ('DUETIME_NOPE_X')",
        "syntax_cli": "has a syntax error: invalid syntax",
        "dep_cli": f"raised ModuleNotFoundError at {tmp_path / 'dep_cli.py'}:1 while it was "
        "imported (No module named 'nosuchdependency_cli')",
        "absent_cli": "cannot import task module 'absent_cli'",
        "fine_cli.py": "--import takes a module name, not a file: --import fine_cli",
        "a_cli,b_cli": "give --import once per module",
    }
    for module, text in expected.items():
        r = CliRunner().invoke(main, ["run", "--import", module], env=env)
        assert r.exit_code == 2, (module, r.output)
        lines = [line for line in r.output.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and text in lines[0], (module, r.output)
        if module != "absent_cli" and "," not in module and ".py" not in module:
            assert "pass --path DIR" not in lines[0], lines[0]  # it was found


def test_run_with_its_metrics_port_in_use_is_one_line(redis_server, redis_ns):
    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        r = CliRunner().invoke(
            main,
            ["run", "--redis", redis_server.url, "-n", redis_ns, "--metrics-port", str(port)]
            + ["--import", "tests.helpers"],
        )
    finally:
        holder.close()
    assert r.exit_code == 2, r.output
    assert f"cannot serve metrics on 127.0.0.1:{port}" in r.output and "Traceback" not in r.output


WRONG_KIND = {  # a URL of one kind given a server of another: what the one line must say
    "no-password": "requires a password",
    "not-a-sentinel": "not a sentinel",
    "a-sentinel": "names a Redis Sentinel, not a Redis server (it does not know GET): use a "
    "redis+sentinel://",
    "no-sentinel": "no sentinel of",
    "not-a-cluster": "is not a cluster",
    "tls-to-plain": "does that port serve TLS",
}


@pytest.fixture(scope="module")
def password_url() -> Iterator[str]:
    """A server of its own that requires a password (the URL given leaves it out)."""
    import redis

    from scheduler.embedded import EmbeddedRedis

    with EmbeddedRedis(appendonly=False) as server:
        admin = redis.Redis.from_url(server.url)
        admin.config_set("requirepass", "sekret")
        admin.close()
        yield server.url


@pytest.mark.parametrize("mistake", list(WRONG_KIND))
@pytest.mark.parametrize("command", ["enqueue", "ls", "stats", "run"])
def test_a_url_of_the_wrong_kind_says_what_to_change(
    command, mistake, password_url, redis_server, lone_sentinel
):
    """A stranger's likely mistakes: no password for a server that needs one, a Sentinel
    URL that names a plain server or nothing that answers, a sentinel's port in a redis://
    URL (redis-py's "unknown command 'GET'"), a Cluster URL for a single server. One line
    that names the mistake, exit 3, never "failed unexpectedly" (redis-py's
    RedisClusterException is not a RedisError) nor redis-py's client reprs."""
    host = redis_server.url.split("://", 1)[1].rsplit("/", 1)[0]
    url = {
        "no-password": password_url,
        "not-a-sentinel": f"redis+sentinel://{host}/mymaster",
        "a-sentinel": lone_sentinel,
        "no-sentinel": "redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster",
        "not-a-cluster": f"redis+cluster://{host}",
        "tls-to-plain": f"rediss://{host}/0",
    }[mistake]
    t0 = time.monotonic()
    result = invoke(command, url, COMMANDS[command])
    took = time.monotonic() - t0
    out = result.output
    assert result.exit_code == 3, (mistake, out)
    if mistake == "no-sentinel":  # one try per sentinel (redis-py's own retries: 7-15 s)
        assert took < 4.0, took
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    line = errors[0]
    assert WRONG_KIND[mistake] in line, line
    assert "unexpectedly" not in line and "<redis." not in line and "Traceback" not in out, line


@pytest.fixture(scope="module")
def replica_url(redis_server) -> Iterator[str]:
    """A read-only replica of the shared test server."""
    from scheduler.embedded import EmbeddedRedis

    host, port = redis_server.url.split("://", 1)[1].rsplit("/", 1)[0].rsplit(":", 1)
    with EmbeddedRedis(appendonly=False, extra_args=["--replicaof", host, port]) as server:
        yield server.url


@pytest.mark.parametrize("command", ["enqueue", "cancel", "run"])
def test_a_url_that_names_a_replica_says_to_give_the_primary(command, replica_url):
    result = invoke(command, replica_url, COMMANDS[command])
    assert result.exit_code == 3, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "is a read-only replica" in errors[0], result.output
    assert "give the primary's address" in errors[0], errors[0]


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--metrics-port", "99999"],  # was "run failed unexpectedly: OverflowError"
        ["run", "--log-level", "LOUD"],
        ["top", "--interval", "-1", "--iterations", "2"],
        ["top", "--iterations", "0"],
        ["demo", "--seconds", "0"],  # was a run that proved nothing, reported as OK
        ["run", "--workers", "0"],  # was refused by the engine, after connecting
        ["run", "--lease", "0.01"],  # was accepted: a lease lost at every pause, jobs re-run
        ["run", "--resync", "0"],
        ["run", "--shutdown-timeout", "-1"],  # was "jobs still running after -1.0s"
        ["run", "--shutdown-timeout", "nan"],  # was an error at the first SIGTERM
        ["run", "--summary-every", "inf"],  # was "run failed unexpectedly: OverflowError"
    ],
)
def test_out_of_range_options_are_usage_errors_before_any_work(args, redis_server):
    result = CliRunner().invoke(main, [*args, "--redis", redis_server.url])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "unexpectedly" not in result.output
    assert "Invalid value" in result.output, result.output


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "tests.noop", "--in", "1h"],  # was exit 3 after 5 s, blaming Redis
        ["run", "--workers", "1", "--import", "tests.helpers"],
    ],
)
def test_a_wait_longer_than_a_redis_call_may_take_is_refused_first(args, redis_server):
    wait = ["--wait-replicas", "1", "--wait-timeout-ms", "6000"]
    result = CliRunner().invoke(main, [*args, *wait, "--redis", redis_server.url])
    assert result.exit_code == 2, result.output
    assert "--wait-timeout-ms 6000 is over 4000, the most a WAIT may take" in result.output
    assert "Traceback" not in result.output


def test_import_of_module_colon_attribute_says_to_give_the_module(tmp_path, redis_server):
    (tmp_path / "mytasks.py").write_text("")
    result = CliRunner().invoke(
        main,
        ["run", "--import", "mytasks:hello", "--path", str(tmp_path), "--redis", redis_server.url],
    )
    assert result.exit_code == 2, result.output
    assert "--import takes a module name" in result.output, result.output
    assert "--import mytasks" in result.output, result.output


def test_the_demo_does_not_call_a_run_that_proved_nothing_ok():
    from scheduler.cli.demo_shared import Report

    assert not Report().ok  # nothing ran, nobody was killed
    assert not Report(invocations=3, executions=3, completed=3).ok  # nobody was killed
    run = dict(invocations=3, executions=4, completed=3, killed_pid=42)
    assert not Report(**run).ok  # killed with nothing in flight: no takeover shown
    takeover = {"inv": "a@1", "pid": 7, "attempt": 2, "fence": 9}
    assert Report(**run, in_flight=["a@1"], reruns=[takeover]).ok
    assert not Report(**run, in_flight=["a@1", "b@1"], reruns=[takeover]).ok  # b not taken
    for bad in ({"lost": ["j3"]}, {"doubled": ["c@1"]}, {"bad_reruns": [takeover]}):
        assert not Report(**run, in_flight=["a@1"], reruns=[takeover], **bad).ok, bad


def test_kwargs_nested_too_deeply_are_a_usage_error(redis_server):
    """Was "enqueue failed unexpectedly: RecursionError" (exit 1)."""
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    r = CliRunner().invoke(
        main, ["enqueue", "t.x", "--in", "1s", "--redis", redis_server.url, "--kwargs", deep]
    )
    assert r.exit_code == 2 and "nested too deeply" in r.output, r.output


def test_input_told_in_python_terms_says_it_in_the_commands(redis_server, monkeypatch):
    """Each was one line, but in Python's words: int()'s, json's, importlib's."""
    url = ["--redis", redis_server.url]
    huge = '{"n": ' + "9" * 5000 + "}"
    r = CliRunner().invoke(main, ["enqueue", "t.x", "--in", "1s", *url, "--kwargs", huge])
    assert r.exit_code == 2 and "--kwargs holds a number too long to read" in r.output, r.output
    for module in ("", "../etc", ".tasks"):
        r = CliRunner().invoke(main, ["run", *url, "--import", module])
        assert r.exit_code == 2, r.output
        assert f"--import {module!r} is not a module name" in r.output, r.output
    monkeypatch.setenv("DUETIME_SHARDS", "abc")
    r = CliRunner().invoke(main, ["stats", *url])
    assert r.exit_code == 2 and "DUETIME_SHARDS='abc': the shard count must be" in r.output


@pytest.mark.parametrize("depth", [300, 1_200, 100_000])
def test_kwargs_nested_past_the_limit_at_any_depth_say_so(redis_server, depth):
    """Issue 31: a list nested 1,200 deep as --kwargs (JSON this Python parses) raised
    RecursionError while the error's message was built; any depth gets the refusal, exit
    2: not a mapping, or (inside one) nested too deeply."""
    url = redis_server.url
    for kwargs, said in (
        ("[" * depth + "]" * depth, ("kwargs must be a mapping", "nested too deeply")),
        ('{"a":' + "[" * depth + "]" * depth + "}", ("nested too deeply",)),
    ):
        r = CliRunner().invoke(main, ["enqueue", "t.x", "--in", "1s", "--redis", url,
                                      "--kwargs", kwargs])  # fmt: skip
        assert r.exit_code == 2, r.output
        assert any(s in r.output for s in said) and "Recursion" not in r.output, r.output
        assert "Traceback" not in r.output, r.output


def _float_options(command: click.Command, path: str) -> Iterator[tuple[str, click.Parameter]]:
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _float_options(sub, f"{path} {name}")
    else:
        for param in command.params:
            if isinstance(param.type, click.FloatRange | click.types.FloatParamType):
                yield f"{path} {param.opts[0]}", param


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_no_float_option_of_any_command_takes_nan_or_infinity(value):
    # click's FloatRange compares the bounds, and nan compares false with both: `run
    # --switch-interval nan` aborted the interpreter ("Fatal Python error: take_gil"),
    # `--summary-every nan` logged summaries in a busy loop, `--resync nan` was taken.
    options = dict(_float_options(main, "duetime"))
    assert "duetime run --switch-interval" in options and len(options) > 20
    for where, param in options.items():
        with pytest.raises(click.BadParameter):
            param.type.convert(value, param, None)
            pytest.fail(f"{where} took {value}")


@pytest.mark.parametrize(
    "args, start",
    [
        (["enqueue", "t", "--cron", "61 * * * *"], "error: invalid cron expression '61 * * * *'"),
        (["enqueue", "t", "--cron", "* * * * *", "--tz", "Mars/Base"], "error: unknown IANA"),
        (["ls", "--cursor", "garbage"], "error: "),
    ],
)
def test_input_the_library_refuses_is_one_line_and_exit_2(args, start, redis_server):
    """facades.md: bad input on the command line is one line on stderr, exit 2 (a cron or
    zone refusal came as click's 4-line usage block)."""
    result = CliRunner().invoke(main, [*args, "--redis", redis_server.url])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(start) and result.stderr.count("\n") == 1, result.stderr


def test_a_huge_refused_input_is_clipped_in_its_error(redis_server):
    expr = "0 0 " + ",".join(["1"] * 200_000) + " * 9"
    result = CliRunner().invoke(main, ["enqueue", "t", "--cron", expr, "--redis", redis_server.url])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert len(result.stderr) < 1200 and "characters)" in result.stderr


@pytest.mark.parametrize(
    "extra", [["--ambiguous", "both"], ["--missing", "skip"], ["--tz", "UTC"], ["--jitter", "5s"]]
)
def test_calendar_options_without_cron_are_refused_not_ignored(extra, redis_server):
    """--ambiguous both --every 60 exited 0, the option silently ignored."""
    args = ["enqueue", "t", "--every", "60", *extra, "--redis", redis_server.url]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "apply to --cron only" in result.output, result.output
