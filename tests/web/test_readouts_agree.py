"""Issue 31, "One truth in every readout": what is running and which replicas are alive
read the same in ``duetime ls``, ``show``, ``stats``, the console and the metrics gauges.

* After ``cancel --interrupt`` of a job whose invocation still runs on a replica (it stops
  at the replica's next lease renewal), ``ls --state running`` printed "no running jobs"
  while ``stats`` said "running 1" and ``show`` listed the invocation with its lease: the
  listing kept only jobs whose own state is ``running``, and a cancelled job's is
  ``cancelled``. Every readout now reads the RUNNING hash: a job with an invocation there
  is running, whatever its own state, until that invocation ends.
* A replica killed with SIGKILL counted as alive until its live key expired (3 leases,
  90 s by default). Now a replica is alive while its last claim is at most 2 x its resync
  old (it claims at least every 1.5 x resync); an older one reads "last seen N s ago".
  Deterministic: the live keys are written as a claim writes them, with past claim times.
"""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

from scheduler import Client, RedisStore, current_invocation, task
from scheduler.cli import main
from scheduler.stores.redis.reading import console_history, fleet, queries
from tests.helpers import WAIT

pytestmark = pytest.mark.redis

LEASE = 3.0
_seen: dict[str, threading.Event] = {}


@task("tests.readouts.wait_for_stop")
def wait_for_stop() -> str:
    _seen["started"].set()
    current_invocation().token.wait(WAIT)
    return "stopped"


def _cli(redis_url: str, redis_ns: str, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--redis", redis_url, "-n", redis_ns])
    assert result.exit_code == 0, result.output
    return result.stdout


def _readouts(redis_url: str, redis_ns: str, web) -> dict[str, object]:
    """What each readout says is running."""
    cli = (redis_url, redis_ns)
    store = RedisStore(redis_url, redis_ns)
    try:
        gauges = queries.gauges(store)
    finally:
        store.close()
    api = f"/api/ns/{redis_ns}"
    return {
        "ls running": [j["job_id"] for j in json.loads(_cli(*cli, "ls", "--state", "running",
                                                            "--json"))["jobs"]],
        "ls live": [
            (j["job_id"], j["running"] != [])
            for j in json.loads(_cli(*cli, "ls", "--json"))["jobs"]
        ],
        "stats": json.loads(_cli(*cli, "stats", "--json"))["running"],
        "console running": [r["job_id"] for r in web.get(f"{api}/running").json()["running"]],
        "console jobs": [
            j["job_id"] for j in web.get(f"{api}/jobs", params={"state": "running"}).json()["jobs"]
        ],
        "console overview": web.get(f"{api}/overview").json()["running"],
        "metrics": gauges["running"],
    }  # fmt: skip


def test_a_job_cancelled_while_it_runs_is_running_in_every_readout_until_it_ends(
    console_factory, make_engine, clock, redis_url, redis_ns
):
    _seen.update(started=threading.Event())
    replica = make_engine(num_workers=1, store=RedisStore(redis_url, redis_ns, clock=clock),
                          lease=LEASE)  # fmt: skip
    client = Client(RedisStore(redis_url, redis_ns, clock=clock))
    job = client.enqueue("tests.readouts.wait_for_stop", delay=0)
    clock.advance(0.01)
    assert _seen["started"].wait(WAIT)
    web, _ = console_factory()
    asked = CliRunner().invoke(main, ["cancel", job, "--interrupt", "--redis", redis_url,
                                      "-n", redis_ns])  # fmt: skip
    assert asked.exit_code == 0, asked.output
    assert client.get(job).state == "cancelled"  # the job; its invocation runs on
    assert _readouts(redis_url, redis_ns, web) == {
        "ls running": [job],
        "ls live": [(job, True)],
        "stats": 1,
        "console running": [job],
        "console jobs": [job],
        "console overview": 1,
        "metrics": 1,
    }
    listed = _cli(redis_url, redis_ns, "ls", "--state", "running")
    assert "cancelled, 1 running" in listed and "no running jobs" not in listed
    shown = _cli(redis_url, redis_ns, "show", job)
    assert "state        cancelled, 1 running" in shown and "running      1" in shown
    assert "cancelled, 1 running" in web.get(f"/ns/{redis_ns}/job/{job}").text
    clock.advance(LEASE / 3 + 0.01)  # the replica's heartbeat reads the request: it stops
    assert replica.wait_idle()
    assert _readouts(redis_url, redis_ns, web) == {
        "ls running": [],
        "ls live": [],
        "stats": 0,
        "console running": [],
        "console jobs": [],
        "console overview": 0,
        "metrics": 0,
    }
    shown = _cli(redis_url, redis_ns, "show", job)
    assert "state        cancelled\n" in shown and "running      none" in shown


def test_a_replica_whose_last_claim_is_old_is_last_seen_not_alive_in_every_readout(
    console_factory, redis_url, redis_ns, redis_client
):
    store = RedisStore(redis_url, redis_ns)
    try:
        sec, usec = redis_client.time()
        now = int(sec) + int(usec) / 1e6
        claims = {"fresh": now - 1, "killed": now - 40, "slow": now - 40}
        for owner, at in claims.items():  # as claim.lua writes it: TTL 3 leases (90 s)
            redis_client.set(store.keys.replica(owner), str(round(at * 1000)), px=90_000)
            info = {"version": "t", "heartbeat": at, "workers": 1}
            if owner == "slow":  # a replica run with --resync 30: alive within 60 s
                info["resync"] = 30.0
            console_history.record(store, owner, int(at // 60), {}, {}, info)
        gauges = queries.gauges(store)
    finally:
        store.close()
    stats = json.loads(_cli(redis_url, redis_ns, "stats", "--json"))
    assert stats["replicas_alive"] == 2 and gauges["replicas"] == 2
    by_id = {r["id"]: r for r in stats["replicas"]}
    assert {i: r["alive"] for i, r in by_id.items()} == {
        "fresh": True,
        "killed": False,
        "slow": True,
    }
    assert 40 <= by_id["killed"]["last_seen"] < 40 + fleet.alive_within(None)
    text = _cli(redis_url, redis_ns, "stats")
    line = next(x for x in text.splitlines() if x.startswith("replicas"))
    assert line.startswith("replicas    2 alive: fresh (last claim") and "killed" not in line
    assert "\n  killed last seen 4" in text and "ago, not alive" in text
    web, _ = console_factory()
    overview = web.get(f"/api/ns/{redis_ns}/overview").json()
    assert overview["replicas_alive"] == 2
    assert {r["id"]: r["alive"] for r in overview["replicas"]} == {
        "fresh": True,
        "killed": False,
        "slow": True,
    }
    page = web.get(f"/ns/{redis_ns}").text
    assert "no: last seen 4" in page and "stopped, killed or stalled" in page
    top = _cli(redis_url, redis_ns, "top", "--iterations", "1")
    assert "replicas 2 " in top
