"""A Redis Cluster on loopback: three masters, no replicas, each an ``EmbeddedRedis`` with
``cluster-enabled yes`` on a free port (and a free cluster-bus port), its own directory,
joined by ``redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes``.

    with LocalCluster() as cluster:
        cluster.url        # redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
        cluster.seed_url   # redis://127.0.0.1:P1/0 (one node, for raw inspection)

Every process runs in its own process group and is stopped at ``close()``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from scheduler.embedded import HOST, EmbeddedRedis, _free_port, find_server
from tests.redis_fixtures import unavailable

__all__ = ["LocalCluster", "shared_redis_cluster"]

MASTERS = 3


class LocalCluster:
    """Three cluster-enabled masters covering all 16384 slots (see the module docstring)."""

    def __init__(self, *, masters: int = MASTERS, start_timeout: float = 30.0) -> None:
        cli = shutil.which("redis-cli")
        if find_server() is None or cli is None:
            raise RuntimeError("a Redis Cluster needs redis-server and redis-cli")
        self.nodes: list[EmbeddedRedis] = []
        try:
            for _ in range(masters):
                bus = _free_port()
                node = EmbeddedRedis(
                    appendonly=False,
                    extra_args=[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "5000",
                        "--cluster-port",
                        str(bus),
                    ],
                )
                self.nodes.append(node.start())
            subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *[f"{HOST}:{n.port}" for n in self.nodes],
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=start_timeout,
            )
            self._wait_ok(start_timeout)
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a seed."""
        return "redis+cluster://" + ",".join(f"{HOST}:{n.port}" for n in self.nodes)

    @property
    def seed_url(self) -> str:
        """A plain URL of the first node (for ``CLUSTER INFO`` and the like)."""
        return self.nodes[0].url

    def _wait_ok(self, timeout: float) -> None:
        """Poll every node until each reports ``cluster_state:ok`` (the gossip has
        converged); no signal crosses the processes, so polling with a deadline."""
        import redis

        deadline = time.monotonic() + timeout
        for node in self.nodes:
            with redis.Redis(host=HOST, port=node.port, decode_responses=True) as r:
                while r.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"cluster not ok after {timeout}s: node {node}")
                    time.sleep(0.05)

    def close(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def shared_redis_cluster() -> Iterator[LocalCluster]:
    """One local cluster for the whole run, started on first use (namespaces keep the
    tests apart; tests/conftest.py makes it available everywhere)."""
    if find_server() is None or shutil.which("redis-cli") is None:
        unavailable("a Redis Cluster test needs redis-server and redis-cli on PATH")
    cluster = LocalCluster()
    try:
        yield cluster
    finally:
        cluster.close()
