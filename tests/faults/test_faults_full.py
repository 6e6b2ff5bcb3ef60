"""The full fault matrix (docs/reliability.md), excluded from the default run:

    python -m pytest -m faults_full tests/faults        (several minutes)

F9 (Sentinel failover) runs tests/integration/failover.py's scenario for both faults.
"""

from __future__ import annotations

import pytest

from tests.faults import scenarios, scenarios_more
from tests.sentinel_fixtures import sentinel_cluster  # noqa: F401

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.faults_full]


def test_f1_full(tmp_path):
    out = scenarios.owner_kills(tmp_path, n=500, kills=10, replicas=5)
    assert out.ok and out.report.lost == 0 and out.figures["kills"] == 10, out


def test_f3_clean_shutdown_variant(tmp_path):
    out = scenarios.redis_restart(tmp_path, n=200, kill=False)
    assert out.ok and out.report.lost == 0, out


def test_f4_redis_back_empty_is_detected_and_reported(tmp_path):
    out = scenarios_more.redis_empty(tmp_path)
    assert out.figures["detected"] and out.figures["detect_ms"] < 5000, out
    assert out.figures["data_loss_events"] >= 1 and out.report.lost > 0, out


@pytest.mark.parametrize("how", ["reset", "sigstop"])
def test_f5_other_outages(tmp_path, how):
    out = scenarios.redis_unreachable(tmp_path, seconds=10.0, how=how)
    assert out.ok and out.report.lost == 0, out
    assert out.figures["resume_ms"] is not None and out.figures["resume_ms"] <= 3000, out


def test_f7_slow_and_lossy_network(tmp_path):
    out = scenarios_more.slow_network(tmp_path)
    assert out.ok and out.report.lost == 0, out
    # at 100 ms and through the lost replies: none; at 400 ms (L/5) a rare re-run when
    # a new connection's handshakes plus the commit outlast the lease (fenced, counted)
    assert set(out.report.duplicates) <= {"slow network"}, out
    assert out.figures["dropped_replies"] == 3, out


def test_f8_ten_thousand_jobs_five_replicas_ten_kills(tmp_path):
    out = scenarios_more.scale(tmp_path)
    assert out.ok and out.report.lost == 0 and out.figures["kills"] == 10, out
    assert set(out.report.duplicates) <= {"owner death"}, out


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_f9_sentinel_failover(sentinel_cluster, redis_url, tmp_path, fault):  # noqa: F811
    """A failover under load (primary SIGKILLed, or SIGSTOPped: a split brain): what was
    lost is reported, never silent; after the failover every enqueue runs once."""
    from tests.integration.failover import run_failover

    report = run_failover(sentinel_cluster, redis_url, tmp_path, fault=fault)
    print(f"\nF9 {fault}: {report.line()}\n  " + "\n  ".join(report.details))
    lost = report.lost_never_ran + report.lost_but_ran
    assert report.stuck == 0, report.line()
    # after a kill, every later enqueue runs once; in a split brain the old primary still
    # acknowledged some, and those are the losses (reported below)
    assert report.after_not_once <= (lost if fault == "stop" else 0), report.line()
    assert report.failover_events == 2, report.details
    if lost or report.reruns_same_attempt:  # Redis forgot writes: that is reported
        assert report.data_loss_events > 0, report.line()


def test_f10_memory_pressure(tmp_path):
    out = scenarios_more.memory_pressure(tmp_path)
    assert out.ok, out
    assert out.figures["refused"] and not out.figures["half_written"], out
    assert out.figures["evicted_keys"] == 0 and out.figures["runs_after_freeing"], out


def test_f10d_a_full_redis_drains_itself(tmp_path):
    scenarios_more.assert_drained(scenarios_more.full_drain(tmp_path, n=5000, spread=5.0))


def test_f11_long_jobs_and_max_runtime(tmp_path):
    out = scenarios_more.long_jobs(tmp_path)
    assert out.ok, out
    assert out.figures["long_job_claims"] == [1, 1], out
    assert out.figures["capped_job_events"][-2:] == ["failed", "dead_lettered"], out
    assert out.figures["capped_job_events"].count("retried") == 1, out


def test_f11_failing_renewals(tmp_path):
    out = scenarios_more.failing_renewals(tmp_path)
    assert out.ok and out.figures["owner_told"], out
    assert out.report.stale_commits_rejected == 1, out


def test_f12_script_flush_under_load(tmp_path):
    out = scenarios_more.script_flush(tmp_path)
    assert out.ok and out.figures["failed"] == 0, out
