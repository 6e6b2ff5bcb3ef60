"""``duetime`` commands on a Redis Cluster URL and on a sharded namespace: enqueue with
``--shards``, inspection with ``?shards=N`` in the URL (or $DUETIME_SHARDS), stats summed
over shards, and a shard count that does not match the namespace's refused."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from scheduler.cli import main

pytestmark = [pytest.mark.redis]


def run(*args: str, env: dict[str, str] | None = None):  # noqa: ANN201
    return CliRunner().invoke(main, list(args), env=env)


@pytest.mark.parametrize("where", ["cluster", "redis"])
def test_enqueue_ls_show_stats_cancel_on_a_sharded_namespace(where, request, redis_ns):
    base = (
        request.getfixturevalue("shared_redis_cluster").url + "/"
        if where == "cluster"
        else request.getfixturevalue("redis_url")
    )
    for i in range(6):
        r = run(
            "enqueue",
            "--redis",
            base,
            "-n",
            redis_ns,
            "--shards",
            "4",
            "t.x",
            "--in",
            "60",
            "--id",
            f"j{i}",
        )
        assert r.exit_code == 0, r.output
    url = f"{base}?shards=4"
    r = run("ls", "--redis", url, "-n", redis_ns, "--json")
    assert r.exit_code == 0, r.output
    assert sorted(j["job_id"] for j in json.loads(r.output)["jobs"]) == [f"j{i}" for i in range(6)]
    r = run("stats", "--redis", base, "-n", redis_ns, "--json", env={"DUETIME_SHARDS": "4"})
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["queue_depths"] == {"default": 6}  # summed over shards
    r = run("show", "--redis", url, "-n", redis_ns, "j4", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["job_id"] == "j4"
    assert run("cancel", "--redis", url, "-n", redis_ns, "j4").exit_code == 0
    r = run("enqueue", "--redis", base, "-n", redis_ns, "--shards", "8", "t.x", "--in", "60")
    assert r.exit_code == 1 and "has 4 shard(s)" in r.output and "--shards 4" in r.output
    for bad in (f"{base}?shards=2", base):  # a wrong count, or none (one shard)
        r = run("stats", "--redis", bad, "-n", redis_ns)
        assert r.exit_code == 1 and "has 4 shard(s)" in r.output
