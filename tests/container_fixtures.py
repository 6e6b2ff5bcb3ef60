"""The container tier: the store contract suite on several server versions, each in a
Docker container (testcontainers), where a Docker daemon answers.

``container_server`` (session, one parameter per image in ``IMAGES``) starts the image
once per run and yields its image and URL (a random host port: the host's 6379 is
untouched). Where no daemon answers, or testcontainers is missing, every test on it is
skipped with ``skip_reason()``, which says that the container tier has not run, so a
green run never passes for one that tested these versions. Detection is one quick ping,
once per run (``DOCKER_TIMEOUT``): no client, no socket, no daemon each answer in
milliseconds.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

__all__ = [
    "IMAGES",
    "ContainerServer",
    "container_server",
    "docker_problem",
    "require_docker",
    "skip_reason",
]

IMAGES = ("redis:7.0", "redis:7.2", "redis:7.4", "valkey/valkey:8")
DOCKER_TIMEOUT = 3  # seconds, for the one ping (a remote DOCKER_HOST that never answers)
SERVER_FLAGS = "--save '' --appendonly yes --maxmemory-policy noeviction"  # as EmbeddedRedis


@functools.cache
def docker_problem() -> str | None:
    """None when testcontainers is installed and a Docker daemon answers a ping; else why
    not, in a few words. Asked once per run."""
    try:
        import docker
        from testcontainers.core.docker_client import get_docker_host
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[test]')"
    host = None
    try:
        host = get_docker_host()  # DOCKER_HOST, ~/.testcontainers.properties, docker context
        client = (
            docker.DockerClient(base_url=host, timeout=DOCKER_TIMEOUT)
            if host
            else docker.from_env(timeout=DOCKER_TIMEOUT)
        )
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # docker.errors.DockerException, OSError, requests' errors
        where = host or "the default socket"
        return f"no Docker daemon answered at {where} ({type(exc).__name__})"
    return None


def skip_reason(problem: str) -> str:
    """The skip reason of every container-tier test when Docker is unusable."""
    return (
        f"container tier not run: {problem}; the store contract was NOT tested on "
        f"{', '.join(IMAGES)} (docs/testing.md)"
    )


def require_docker() -> None:
    """Skip the calling test, with ``skip_reason``, unless Docker is usable."""
    problem = docker_problem()
    if problem is not None:
        pytest.skip(skip_reason(problem))


class ContainerServer(NamedTuple):
    image: str  # e.g. "redis:7.2"
    url: str  # redis://host:port/0


def _image_id(image: str) -> str:
    return image.rpartition("/")[2].replace(":", "-")  # valkey/valkey:8 -> valkey-8


@pytest.fixture(scope="session", params=IMAGES, ids=_image_id)
def container_server(request: pytest.FixtureRequest) -> Iterator[ContainerServer]:
    """A server of the parameter's image, started once per run; skipped (with
    ``skip_reason``) where Docker is unusable. A daemon that answers but cannot start the
    image is an error, not a skip."""
    require_docker()
    try:
        from testcontainers.community.redis import RedisContainer
    except ImportError:  # an older testcontainers
        from testcontainers.redis import RedisContainer

    image: str = request.param
    server = "valkey-server" if image.startswith("valkey") else "redis-server"
    container: Any = RedisContainer(image).with_command(f"{server} {SERVER_FLAGS}")
    container.start()
    try:
        host = container.get_container_host_ip()
        yield ContainerServer(image, f"redis://{host}:{container.get_exposed_port(6379)}/0")
    finally:
        container.stop()
