"""The fakeredis tier: a ``RedisStore`` on an in-process fakeredis server (with Lua, via
lupa), so the store contract and calendar-store suites run the real Lua scripts with no
``redis-server`` and no Docker, in seconds.

The scripts run as their Redis Functions libraries (``FCALL``), which fakeredis loads
(tests/lua/test_fakeredis_tier.py); it does not parse a script's ``#!lua`` shebang line,
so a client of this tier never falls back to ``EVALSHA`` (the real-server tier tests that).

What fakeredis cannot model stays on the real-server tier (``-m redis``): killing or
restarting the server, AOF, ``maxmemory``, ``TIME`` on another server, replication,
Sentinel, Cluster, and ``INFO`` (so the server checks). The suites that need them use the
``redis_url``/``private_redis``/cluster/Sentinel fixtures and never see this kind. A test
on the ``store`` fixture that needs one of them is listed in ``UNSUPPORTED`` with its
reason, and is skipped (reported, not passed) on the fakeredis kind.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["UNSUPPORTED", "fakeredis_client", "skip_unsupported"]

# "file::test" (no parameters) -> why fakeredis cannot run it on the fakeredis kind of the
# ``store`` fixture. Every test of tests/contract/test_store.py and
# tests/calendar/test_calendar_stores.py runs on it; these two drive a whole engine, which
# first checks the server with INFO (version, maxmemory-policy, AOF: docs/guarantees.md), and
# fakeredis 2.41 has no INFO command.
_NO_INFO = (
    "an engine checks the server first (INFO: version, maxmemory-policy, AOF) and "
    "fakeredis has no INFO command"
)
UNSUPPORTED: dict[str, str] = {
    f"test_workers.py::{name}": _NO_INFO
    for name in (
        "test_unknown_task_is_handed_back_then_failed_not_retried_forever",
        "test_shutdown_hands_unstarted_claims_back_to_the_store",
        "test_a_failing_hand_back_does_not_stop_the_shutdown",
        "test_arguments_that_do_not_parse_fail_at_once_as_malformed",
    )
}
UNSUPPORTED["test_async_jobs.py::test_an_async_registered_task_runs_through_every_store"] = _NO_INFO
UNSUPPORTED[
    "test_async_jobs.py::test_a_sync_job_that_returns_when_interrupted_is_interrupted_like_an_async_one"
] = _NO_INFO
UNSUPPORTED["test_tracing_skips.py::test_a_misfire_skip_is_an_event_of_the_run_that_follows"] = (
    _NO_INFO
)
UNSUPPORTED.update(
    {
        f"test_shutdown.py::{name}": _NO_INFO
        for name in (
            "test_a_shutdown_that_times_out_while_exiting_hands_the_running_leases_back",
            "test_a_shutdown_that_times_out_keeps_the_leases_of_a_process_that_lives_on",
            "test_serve_cancelled_while_exiting_hands_the_running_leases_back",
        )
    }
)


def fakeredis_client() -> Any:
    """A fakeredis client (``decode_responses=True``, as ``RedisStore`` expects) on a new,
    private in-process server; skips the test if fakeredis or its Lua support is missing."""
    try:
        import fakeredis
        import lupa  # noqa: F401  (fakeredis runs FCALL through lupa)
    except ImportError as exc:
        pytest.skip(f"fakeredis tier not run: {exc.name} is not installed (pip install '.[test]')")
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)


def skip_unsupported(request: pytest.FixtureRequest) -> None:
    """Skip, with its reason, a test listed in ``UNSUPPORTED``."""
    node = request.node
    reason = UNSUPPORTED.get(f"{node.path.name}::{getattr(node, 'originalname', node.name)}")
    if reason is not None:
        pytest.skip(f"not on fakeredis (run it on the real-server tier, -m redis): {reason}")
