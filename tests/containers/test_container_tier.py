"""The container tier's own behaviour where Docker is absent (runs everywhere): it is
detected at once, and the tier's tests are skipped with a reason that says it has not
run."""

from __future__ import annotations

import time

import pytest

from tests import container_fixtures
from tests.container_fixtures import IMAGES, docker_problem, require_docker, skip_reason


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch):
    """Docker "configured" at a socket that does not exist; the cached answer is dropped
    before and after, so the session's own answer is asked again."""
    from testcontainers.core import docker_client

    monkeypatch.setattr(docker_client, "get_docker_host", lambda: "unix:///nonexistent/d.sock")
    docker_problem.cache_clear()
    yield
    docker_problem.cache_clear()


def test_without_docker_the_tier_is_skipped_at_once_with_a_reason_that_says_so(no_docker):
    started = time.monotonic()
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_docker()
    assert time.monotonic() - started < 2  # no long timeouts where Docker is absent
    reason = skipped.value.msg
    assert reason == (
        "container tier not run: no Docker daemon answered at unix:///nonexistent/d.sock "
        "(DockerException); the store contract was NOT tested on "
        "redis:7.0, redis:7.2, redis:7.4, valkey/valkey:8 (docs/testing.md)"
    )
    assert reason == skip_reason(docker_problem() or "")


def test_the_tier_covers_the_supported_server_versions():
    assert IMAGES == ("redis:7.0", "redis:7.2", "redis:7.4", "valkey/valkey:8")
    assert container_fixtures.DOCKER_TIMEOUT <= 5
