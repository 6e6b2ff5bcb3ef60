"""``duetime web`` as a command: what it prints, its refusals and exit codes (app.py's
table), and a real server answering over HTTP with the password masked."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_actions_need_a_token_or_a_trusted_proxy(redis_url):
    r = CliRunner().invoke(
        main, ["web", "--redis", redis_url, "--actions"], env={"DUETIME_WEB_TOKEN": None}
    )
    assert r.exit_code == 2 and "--actions needs a token" in r.output


def test_no_url_and_an_empty_token_file(tmp_path):
    r = CliRunner().invoke(main, ["web"], env={"DUETIME_REDIS_URL": None})
    assert r.exit_code == 2 and "web needs --redis URL" in r.output
    empty = tmp_path / "token"
    empty.write_text("\n")
    r = CliRunner().invoke(main, ["web", "--redis", "redis://x", "--token-file", str(empty)])
    assert r.exit_code == 2 and "is empty" in r.output


def test_a_missing_extra_is_one_line_saying_what_to_install(redis_url):
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from scheduler.cli import main\n"
        f"main(['web', '--redis', {redis_url!r}])"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: web: the web extra is missing (uvicorn): pip install 'starlette>=0.37' "
        "'uvicorn>=0.30' 'jinja2>=3.1' 'redis[hiredis]>=5.0.2' (duetime's web extra)"
    ]


@pytest.mark.redis
def test_serves_with_the_password_masked_and_refuses_a_taken_port(redis_server, redis_ns):
    url = f"redis://default:hunter2@127.0.0.1:{redis_server.port}/0"  # nopass accepts any
    argv = [sys.executable, "-m", "scheduler", "web", "--redis", url, "-n", redis_ns, "--port", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "redis://default:***@" in line and "hunter2" not in line and "read-only" in line
        base = line.split()[2]
        with urllib.request.urlopen(base, timeout=10) as reply:
            html = reply.read().decode()
        assert "redis://default:***@" in html and "hunter2" not in html
        rebound = urllib.request.Request(base, headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # DNS rebinding
            urllib.request.urlopen(rebound, timeout=10)
        assert refused.value.code == 400
        port = base.rsplit(":", 1)[1].strip("/")
        taken = subprocess.run([*argv[:-1], port], env=env, capture_output=True, text=True)
        assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_ipv6_loopback_is_bound_and_printed_as_a_url(redis_server, redis_ns):
    """``--host ::1`` printed ``http://::1:PORT/`` (not a URL), and ``--host '[::1]'`` (as a
    URL writes it) was "Name or service not known"."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    argv = [sys.executable, "-m", "scheduler", "web", "--redis", url, "-n", redis_ns]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*argv, "--port", "0", "--host", "[::1]"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stderr.readline()
        base = line.split()[2]
        assert re.fullmatch(r"http://\[::1\]:\d+/", base), line
        with urllib.request.urlopen(base, timeout=10) as reply:
            assert reply.status == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_unreachable_redis_is_exit_3_with_the_password_masked():
    r = CliRunner().invoke(main, ["web", "--redis", "redis://u:s3cret@127.0.0.1:1/0"])
    assert r.exit_code == 3 and "cannot reach Redis at redis://u:***@127.0.0.1:1/0" in r.output
    assert "s3cret" not in r.output


@pytest.mark.redis
@pytest.mark.parametrize(
    "host,warned",
    [("0.0.0.0", True), ("127.0.0.1", False), ("::1", False), ("localhost", False)],
)
def test_a_console_reachable_from_elsewhere_says_what_it_shows(
    redis_server, redis_ns, host, warned
):
    """Read pages need no token: on an address other machines reach, every job's
    arguments and errors are open to them. The command says so at start (unless the
    arguments are redacted); on loopback it says nothing."""
    from scheduler.cli import web

    assert web._loopback(host) is (not warned)
    argv = [sys.executable, "-m", "scheduler", "web", "--redis", redis_server.url, "-n", redis_ns]
    argv += ["--host", "0.0.0.0", "--port", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if host == "0.0.0.0":  # the only one started: binding the others adds nothing here
        for extra, expect in (([], True), (["--redact-args"], False)):
            proc = subprocess.Popen([*argv, *extra], env=env, stderr=subprocess.PIPE, text=True)
            try:
                first, second = proc.stderr.readline(), proc.stderr.readline() if expect else ""
                assert first.startswith("duetime web: http://0.0.0.0:"), first
                if expect:
                    assert "reachable from other machines" in second, second
            finally:
                proc.terminate()
                proc.wait(10)
