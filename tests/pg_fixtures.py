"""A private PostgreSQL server for the tests that need one (``from tests.pg_fixtures import
pg_server, pg_url``): ``initdb`` into a temp dir, then ``postgres`` itself on a free
loopback port (never the machine's own server on 5432), once per session.

- The binaries: ``$DUETIME_PG_BINDIR``, else ``pg_config --bindir``, else the newest
  ``/usr/lib/postgresql/*/bin``. None there: the tests skip with one line (under CI, where
  .ci/run installs Debian's postgresql package, they fail instead).
- initdb refuses to run as root: with euid 0, initdb and the server run as the
  ``postgres`` user (``setpriv``), in a temp dir that user owns.
- ``postgres`` runs in the foreground as our child (not daemonised by ``pg_ctl start``),
  forked with ``PR_SET_PDEATHSIG`` (``spawn_tied``; ``setpriv --pdeathsig`` sets it again
  after the change of user, which clears it): a killed test run leaves no server behind.
  Its backends end with it. Stopped with SIGINT (a fast shutdown) at teardown.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from scheduler.embedded import spawn_tied
from tests.redis_fixtures import in_ci

__all__ = ["pg_server", "pg_url", "PrivatePostgres"]

START_TIMEOUT = 60.0  # a bound on a busy machine, not a wait


def pg_bindir() -> str | None:
    """Where ``initdb`` and ``postgres`` are, or None."""
    candidates = [os.environ.get("DUETIME_PG_BINDIR", "")]
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        candidates.append(out.stdout.strip())
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(versions, key=lambda p: int(p.split("/")[-2]), reverse=True)
    for d in candidates:
        if d and all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "postgres")):
            return d
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """One server in its own temp dir; ``url`` connects as the superuser ``duetime``."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.dir = tempfile.mkdtemp(prefix="duetime-pg-")
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups"]
        data = os.path.join(self.dir, "data")
        init = [os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "duetime"]
        init += ["--no-sync", "-E", "UTF8", "--locale=C"]
        out = subprocess.run([*self._as, *init], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed ({out.returncode}): {out.stderr[-2000:]}")
        self.port = _free_port()
        self.log = os.path.join(self.dir, "server.log")
        server = [os.path.join(bindir, "postgres"), "-D", data, "-p", str(self.port)]
        server += ["-h", "127.0.0.1", "-k", self.dir, "-c", "fsync=off"]
        server += ["-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        tied = [*self._as, "--pdeathsig=KILL", "--"] if self._as else []
        with open(self.log, "ab") as log:
            self.proc = spawn_tied(
                [*tied, *server], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.url = f"postgresql://duetime@127.0.0.1:{self.port}/postgres"
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited ({self.proc.returncode}): {self.tail()}")
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"postgres did not answer: {self.tail()}") from None
                time.sleep(0.05)  # polling another process's readiness: no signal crosses

    def tail(self) -> str:
        with open(self.log, errors="replace") as fh:
            return fh.read()[-2000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: backends end, no wait
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PrivatePostgres]:
    bindir = pg_bindir()
    if bindir is None:
        reason = (
            "no PostgreSQL binaries (initdb, postgres: pg_config --bindir, "
            "/usr/lib/postgresql/*/bin, $DUETIME_PG_BINDIR): install the postgresql package"
        )
        if in_ci():
            pytest.fail(f"CI is set, so PostgreSQL tests may not be skipped: {reason}")
        pytest.skip(reason)
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: initdb cannot run as root")
    server = PrivatePostgres(bindir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PrivatePostgres) -> str:
    return pg_server.url
