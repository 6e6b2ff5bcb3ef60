"""A real ``duetime run`` replica with a process lane (issue 34): a job hung in
``time.sleep(3600)`` is stopped at its timeout, recorded timed out, retried, then
dead-lettered; a job whose worker process SIGKILLs itself fails with the signal named;
the replica and the lane's other jobs go on, and ``--lane`` refuses a bad option in one
line. Cross-process, so the test polls the store (``wait_until``), as the fleet tests do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler import Client, RetryPolicy
from scheduler.cli import main
from scheduler.embedded import spawn_tied
from tests.faults.fleet import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _replica(url: str, ns: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "scheduler", "run", "--redis", url, "--namespace", ns]
    argv += ["--import", "tests.unit.process_jobs", "--workers", "1", "--resync", "0.5"]
    argv += ["--lane", "p=2:process,kill_grace=1", "--log-format", "json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        return spawn_tied(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_replica_stops_a_hung_job_in_a_process_lane_and_goes_on(redis_url, redis_ns, tmp_path):
    log = tmp_path / "replica.log"
    proc = _replica(redis_url, redis_ns, log)
    retry = RetryPolicy(max_attempts=2, backoff=0.2, jitter=0)
    try:
        with Client(redis_url, namespace=redis_ns) as client:
            hung = client.enqueue("proc.hang", delay=0, lane="p", timeout=2, retry=retry)
            killed = client.enqueue("proc.sigkill", delay=0, lane="p", retry=retry)
            assert wait_until(lambda: client.get(hung).state == "failed", 60), log.read_text()
            info = client.get(hung)
            assert info.last_error == "InvocationTimeout: job ran past its timeout of 2s"
            assert [d.attempt for d in info.dead_letters] == [2]  # retried once, per its policy
            assert wait_until(lambda: client.get(killed).state == "failed", 30), log.read_text()
            assert client.get(killed).last_error.endswith(
                "of lane 'p' died while it ran the job: SIGKILL (signal 9)"
            )
            ok = client.enqueue("proc.whoami", delay=0, lane="p", kwargs={"tag": "after"})
            assert wait_until(lambda: client.get(ok).state == "succeeded", 30), log.read_text()
            child = client.get(ok).last_result["pid"]
            assert child != proc.pid
        assert proc.poll() is None  # the replica never died
        text = log.read_text()
        assert "stopped (timeout): exited" in text
        assert "with lanes {'default': 1, 'p': '2:process'}" in text
        # the child's own log line, in the replica's log with the job's fields
        assert f'"msg": "started after in {child}"' in text
        assert f'"job_id": "{ok}"' in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_hung_jobs_over_three_replicas_are_each_stopped_and_retried_once_none_lost_or_doubled(
    redis_url, redis_ns, tmp_path
):
    """The bench's hung-jobs figure (1,000 jobs; tests/bench/bench_process_lanes.py hung),
    scaled down: 9 jobs hung in ``time.sleep(3600)``, a 1 s timeout and one retry, over 3
    replicas of 2 process workers each. Every job ends dead-lettered after exactly its 2
    attempts, each attempt ran (and was stopped) exactly once, and every replica lives."""
    marker = tmp_path / "runs.txt"
    procs = [_replica(redis_url, redis_ns, tmp_path / f"r{i}.log") for i in range(3)]
    retry = RetryPolicy(max_attempts=2, backoff=0.1, jitter=0)
    try:
        with Client(redis_url, namespace=redis_ns) as client:
            kwargs = {"marker": str(marker)}
            jobs = [
                client.enqueue(
                    "proc.hang", delay=0, lane="p", timeout=1, retry=retry, kwargs=kwargs
                )
                for _ in range(9)
            ]

            def done() -> bool:
                return all(client.get(j).state == "failed" for j in jobs)

            assert wait_until(done, 90), [client.get(j).state for j in jobs]
            for job in jobs:
                info = client.get(job)
                assert [d.attempt for d in info.dead_letters] == [2]
                assert info.last_error == "InvocationTimeout: job ran past its timeout of 1s"
        runs = sorted(line.split()[2:] for line in marker.read_text().splitlines())
        assert runs == sorted([job, str(attempt)] for job in jobs for attempt in (1, 2))
        assert all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)


@pytest.mark.parametrize(
    ("lane", "says"),
    [
        ("p=2:proc", "expected ':process' after the size"),
        ("p=2:process,max_jobs=x", "max_jobs must be a number"),
        ("p=2:process,recycle=3", "unknown option 'recycle=3'"),
        ("p=2:process,kill_grace=-1", "Lane.kill_grace must be"),
        ("p=5000:process", "5000 is more than the 256 worker processes one lane may start"),
        ("p=2:process,max_jobs=5,max_jobs=6", "lane 'p': max_jobs is given twice"),
        ("p=2 --lane p=3:process", "lane 'p' is given twice"),
        ("default=1", "the default lane's size is --workers"),
    ],
)
def test_a_bad_process_lane_is_one_line(lane, says, redis_url, redis_ns):
    argv = ["run", "--redis", redis_url, "--namespace", redis_ns]
    argv += ["--import", "tests.unit.process_jobs"]
    for one in lane.split(" --lane "):
        argv += ["--lane", one]
    out = CliRunner().invoke(main, argv)
    assert out.exit_code == 2, out.output
    assert says in out.output
