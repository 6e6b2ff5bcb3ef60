"""The CI subset of the fault matrix (docs/reliability.md) at small N: F1, F2, F3, F5, F6,
F10d, F13 on real replica processes and real redis-servers. The full-size matrix is
``python -m pytest -m faults_full tests/faults`` (test_faults_full.py)."""

from __future__ import annotations

import pytest

from tests.faults import scenarios, scenarios_more

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_f1_killed_owners_lose_nothing_and_rerun_at_most_once(tmp_path):
    out = scenarios.owner_kills(tmp_path, n=120, kills=2)
    assert out.ok, out
    assert out.figures["finished"] and out.report.lost == 0, out
    assert out.report.duplicate_commits == 0, out
    assert set(out.report.duplicates) <= {"owner death"}, out
    assert out.figures["kills"] == 2, out
    # the replica killed after a job's effect, before recording it: that invocation (and
    # any other whose effect it had finished) ran again as attempt 2 (and once more only
    # if that owner was killed too: the checker holds every extra run to a death)
    runs = out.figures["after_effect_attempts"]
    assert runs and all(r[:2] == [1, 2] for r in runs), out


@pytest.mark.parametrize("at", ["mid_run", "before_complete"])
def test_f2_a_paused_owner_cannot_commit(tmp_path, at):
    out = scenarios.owner_pause(tmp_path, at=at)
    assert out.ok, out
    assert out.figures["rerun"] and out.figures["finished"], out
    assert out.report.executions == 2, out
    assert out.report.stale_commits_rejected == 1, out
    assert out.report.duplicates == {"pause past the lease": 1}, out


def test_f3_redis_sigkill_and_restart_with_appendfsync_always(tmp_path):
    out = scenarios.redis_restart(tmp_path, n=150)
    assert out.ok, out
    assert out.figures["finished"] and out.report.lost == 0, out
    assert out.figures["resume_ms"] is not None and out.figures["resume_ms"] < 3000, out


def test_f5_redis_unreachable_for_10_s(tmp_path):
    out = scenarios.redis_unreachable(tmp_path, seconds=10.0, how="blackhole", n=90)
    assert out.ok, out
    assert out.figures["finished"] and out.report.lost == 0, out
    assert out.figures["resume_ms"] is not None and out.figures["resume_ms"] <= 3000, out


def test_f6_replica_clock_skew_of_5_and_300_s_changes_nothing(tmp_path):
    out = scenarios.clock_skew(tmp_path, n=60)
    assert out.ok, out
    assert out.figures["early_runs"] == 0, out
    # a replica that trusted its own clock would start jobs at least the smallest skew
    # (5 s) late (or early: early_runs); how late a starved CPU makes a start is not it
    assert out.figures["lateness_ms_max"] < 5000, out
    assert out.figures["replicas_that_ran"] == 5, out


def test_f13_sigterm_hands_back_and_loses_nothing(tmp_path):
    out = scenarios.sigterm(tmp_path)
    assert out.ok, out
    assert out.figures["exit_code"] == 0 and out.figures["finished"], out
    assert out.figures["lease_lost"] == 0, out  # nothing waited for a lease to lapse
    assert sum(out.report.duplicates.values()) == 0, out


def test_f10d_a_full_redis_drains_itself(tmp_path):
    scenarios_more.assert_drained(scenarios_more.full_drain(tmp_path, n=1200))
