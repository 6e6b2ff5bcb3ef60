"""The store contract suite (tests/contract/test_store.py) on each server version of
tests/container_fixtures.py's ``IMAGES`` (redis 7.0, 7.2, 7.4, valkey 8), each in a
Docker container. Skipped, with a reason saying the container tier has not run, where no
Docker daemon answers. Run it alone with ``python -m pytest -m containers``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.stores.redis import RedisStore
from tests.container_fixtures import (
    ContainerServer,
    container_server,  # noqa: F401  (the fixture)
    docker_problem,
    skip_reason,
)
from tests.contract.test_store import *  # noqa: F403  (every contract test, re-run here)

if (problem := docker_problem()) is not None:  # one skip line for the module, not 172
    pytest.skip(skip_reason(problem), allow_module_level=True)

# a first pull of an image can take a while; it happens in the first test's setup
pytestmark = [pytest.mark.containers, pytest.mark.timeout(600)]


@pytest.fixture
def store(container_server: ContainerServer, clock, redis_ns) -> Iterator[RedisStore]:  # noqa: F811
    """Overrides conftest's ``store``: a RedisStore on the container's server."""
    s = RedisStore(container_server.url, redis_ns, clock=clock)
    yield s
    s.close()


def test_the_server_is_the_image_version_and_passes_the_checks(container_server, store):  # noqa: F811
    store.check_server()  # refuses a server older than 7.0 or one that evicts keys
    info = store.redis.info("server")
    name, _, tag = container_server.image.rpartition("/")[2].partition(":")
    assert str(info[f"{name}_version"]).startswith(f"{tag}.")
