"""A Redis Sentinel setup on loopback for failover tests: one primary, one replica
(``replicaof``) and three ``redis-server --sentinel`` processes (quorum 2), each on a free
port with its own directory and config. Failure detection is fast (``down-after-milliseconds``
1000), so a SIGKILLed primary is replaced in a few seconds.

    with SentinelCluster() as cluster:
        cluster.url            # redis+sentinel://127.0.0.1:P1,...:P3/duetime/0
        cluster.kill_primary() # SIGKILL; returns the killed address
        cluster.wait_failover(old, timeout=15)  # the new primary's address

Every process runs in its own process group and is stopped at ``close()``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest

from scheduler.embedded import HOST, EmbeddedRedis, _free_port, _terminate, find_server, spawn_tied
from tests.redis_fixtures import unavailable

SERVICE = "duetime"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000

__all__ = ["SentinelCluster", "lone_sentinel", "sentinel_cluster", "shared_sentinel_cluster"]


class Sentinel:
    """One ``redis-server sentinel.conf --sentinel`` process."""

    def __init__(self, root: str, index: int) -> None:
        self.dir = os.path.join(root, f"sentinel-{index}")
        os.makedirs(self.dir)
        self.port = _free_port()
        self.myid = uuid.uuid4().hex + uuid.uuid4().hex[:8]  # 40 hex digits
        self.conf = os.path.join(self.dir, "sentinel.conf")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(
        self, binary: str, primary_port: int, replica_port: int, peers: list[Sentinel]
    ) -> None:
        """Write the config (knowing its peers and the replica up front, so no discovery
        round of several seconds is needed) and start the process."""
        known = "".join(
            f"sentinel known-sentinel {SERVICE} {HOST} {p.port} {p.myid}\n"
            for p in peers
            if p is not self
        )
        with open(self.conf, "w") as fh:  # sentinel rewrites this file: one per process
            fh.write(
                f"port {self.port}\nbind {HOST}\ndir {self.dir}\ndaemonize no\n"
                f"logfile {os.path.join(self.dir, 'sentinel.log')}\n"
                f"sentinel monitor {SERVICE} {HOST} {primary_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
                f"sentinel myid {self.myid}\n{known}"
                f"sentinel known-replica {SERVICE} {HOST} {replica_port}\n"
            )
        with open(os.path.join(self.dir, "stdout"), "ab") as out:
            self.proc = spawn_tied(
                [binary, self.conf, "--sentinel"],
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc is not None:
            _terminate(self.proc, 5.0)


class SentinelCluster:
    """Primary + replica + three sentinels (see the module docstring)."""

    def __init__(self, *, appendfsync: str = "everysec", start_timeout: float = 20.0) -> None:
        binary = find_server()
        if binary is None or shutil.which(binary) is None:
            raise RuntimeError("no redis-server binary")
        self.root = tempfile.mkdtemp(prefix="duetime-sentinel-")
        self.servers: list[EmbeddedRedis] = []
        self.sentinels: list[Sentinel] = []
        try:
            # no 5 s wait before a full sync (either server may be the primary later)
            quick = ["--repl-diskless-sync-delay", "0"]
            primary = EmbeddedRedis(
                data_dir=os.path.join(self.root, "primary"),
                appendfsync=appendfsync,
                extra_args=quick,
            ).start()
            self.servers.append(primary)
            replica = EmbeddedRedis(
                data_dir=os.path.join(self.root, "replica"),
                appendfsync=appendfsync,
                extra_args=[*quick, "--replicaof", HOST, str(primary.port)],
            ).start()
            self.servers.append(replica)
            self.sentinels = [Sentinel(self.root, i) for i in range(3)]
            for s in self.sentinels:
                s.start(binary, primary.port, replica.port, self.sentinels)
            self._wait_ready(start_timeout)
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        hosts = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def _sentinel_client(self, s: Sentinel):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis(HOST, s.port, decode_responses=True, socket_timeout=1)

    def _wait_ready(self, timeout: float) -> None:
        """Until the replica is in sync and every sentinel knows the other two and the
        replica (a failover needs both)."""
        import redis

        deadline = time.monotonic() + timeout
        replica = redis.Redis(HOST, self.servers[1].port, decode_responses=True)
        try:
            while time.monotonic() < deadline:
                try:
                    ok = replica.info("replication").get("master_link_status") == "up"
                    for s in self.sentinels:
                        if not ok or s.proc.poll() is not None:
                            break
                        with self._sentinel_client(s) as c:
                            # not c.sentinel_master(): redis-py 6.3-7.0 fails to parse it
                            reply = c.execute_command("SENTINEL", "MASTER", SERVICE)
                            m = (
                                reply
                                if isinstance(reply, dict)
                                else dict(zip(reply[::2], reply[1::2], strict=True))
                            )
                            ok = int(m["num-other-sentinels"]) == 2 and int(m["num-slaves"]) == 1
                    else:
                        if ok:
                            return
                except (redis.ConnectionError, redis.ResponseError):
                    pass
                if any(s.proc.poll() is not None for s in self.sentinels):
                    raise RuntimeError(f"a sentinel exited; see the logs in {self.root}")
                time.sleep(0.1)
        finally:
            replica.close()
        raise RuntimeError(f"the sentinel setup was not ready in {timeout}s (logs in {self.root})")

    def primary_address(self) -> tuple[str, int] | None:
        """The primary as a majority of the live sentinels report it."""
        import redis

        votes: dict[tuple[str, int], int] = {}
        for s in self.sentinels:
            try:
                with self._sentinel_client(s) as c:
                    host, port = c.sentinel_get_master_addr_by_name(SERVICE)
                votes[(host, int(port))] = votes.get((host, int(port)), 0) + 1
            except (redis.ConnectionError, redis.ResponseError, TypeError):
                continue
        best = max(votes.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best and best[1] >= 2 else None

    def server_at(self, port: int) -> EmbeddedRedis:
        return next(s for s in self.servers if s.port == port)

    def kill_primary(self) -> tuple[str, int]:
        """SIGKILL the current primary (no shutdown, no final fsync); its address."""
        address = self.primary_address()
        assert address is not None, "no primary to kill"
        self.server_at(address[1]).kill()
        return address

    def stop_primary(self) -> tuple[str, int]:
        """SIGSTOP the current primary (its clients' connections stay open); its address."""
        address = self.primary_address()
        assert address is not None, "no primary to stop"
        pid = self.server_at(address[1]).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        return address

    def resume(self, address: tuple[str, int]) -> None:
        """SIGCONT a server stopped by ``stop_primary``."""
        pid = self.server_at(address[1]).pid
        assert pid is not None
        os.kill(pid, signal.SIGCONT)

    def wait_demoted(self, address: tuple[str, int], timeout: float = 30.0) -> float:
        """Until the server at ``address`` reports itself a replica; the seconds it took."""
        import redis

        start = time.monotonic()
        with redis.Redis(*address, decode_responses=True, socket_timeout=1) as c:
            while time.monotonic() - start < timeout:
                try:
                    if c.info("replication").get("role") == "slave":
                        return time.monotonic() - start
                except redis.ConnectionError:
                    pass
                time.sleep(0.05)
        raise AssertionError(f"{address} still a primary after {timeout}s")

    def wait_failover(self, old: tuple[str, int], timeout: float = 20.0) -> tuple[str, int]:
        """Until the sentinels name a new primary that answers as a master; its address."""
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            address = self.primary_address()
            if address is not None and address != old:
                with redis.Redis(*address, decode_responses=True, socket_timeout=1) as c:
                    try:
                        if c.info("replication").get("role") == "master":
                            return address
                    except redis.ConnectionError:
                        pass
            time.sleep(0.05)
        raise AssertionError(f"no failover within {timeout}s (logs in {self.root})")

    def close(self) -> None:
        for server in self.servers:  # a stopped server would ignore SIGTERM until SIGKILL
            if server.pid is not None:
                os.kill(server.pid, signal.SIGCONT)
        for s in self.sentinels:
            s.stop()
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SentinelCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cluster() -> Iterator[SentinelCluster]:
    if find_server() is None:
        unavailable("no redis-server found for the Sentinel tests")
    cluster = SentinelCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def sentinel_cluster() -> Iterator[SentinelCluster]:
    """A fresh primary + replica + three sentinels for this test (to fail over); stopped
    afterwards."""
    yield from _cluster()


@pytest.fixture(scope="module")
def shared_sentinel_cluster() -> Iterator[SentinelCluster]:
    """One primary + replica + three sentinels for a whole module (never failed over)."""
    yield from _cluster()


@pytest.fixture(scope="module")
def lone_sentinel() -> Iterator[str]:
    """``redis://`` URL of one ``redis-server --sentinel`` that monitors nothing: a
    sentinel's port given where a Redis server's belongs (it answers PING, not GET)."""
    if find_server() is None:
        unavailable("no redis-server found for the Sentinel tests")
    root = tempfile.mkdtemp(prefix="duetime-lone-sentinel-")
    sentinel = Sentinel(root, 0)
    with open(sentinel.conf, "w") as fh:  # sentinel rewrites its config: a file of its own
        fh.write(f"port {sentinel.port}\nbind {HOST}\ndir {sentinel.dir}\ndaemonize no\n")
    sentinel.proc = spawn_tied(
        [find_server() or "redis-server", sentinel.conf, "--sentinel"],
        cwd=sentinel.dir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        import redis

        probe = redis.Redis(HOST, sentinel.port, socket_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        probe.close()
        yield f"redis://{HOST}:{sentinel.port}/0"
    finally:
        sentinel.stop()
        shutil.rmtree(root, ignore_errors=True)
