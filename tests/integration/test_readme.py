"""The README's redis-cli commands run against a live server, so they never go stale."""

from __future__ import annotations

import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

from scheduler import Client, Scheduler
from scheduler.stores.redis import RedisStore
from tests.helpers import noop  # noqa: F401  (registers tests.noop)

pytestmark = pytest.mark.redis
README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def monitor_commands() -> list[list[str]]:
    text = README.read_text()
    heading = re.search(r"(?m)^#+ Monitor with redis-cli$", text)
    assert heading is not None, "README.md has no 'Monitor with redis-cli' section"
    section = text[heading.start() :]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line.split("#")[0]) for line in block.splitlines() if line.strip()]


def test_monitor_commands_work(redis_server, redis_url, redis_ns):
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed")
    with (
        Scheduler(1, store=RedisStore(redis_url, redis_ns)) as engine,
        Client(redis_url, namespace=redis_ns) as client,
    ):
        client.enqueue("tests.noop", every=3600, job_id="hourly-report")
        engine.after("tests.noop", 0)
        assert engine.wait_idle(5)
        commands = monitor_commands()
        assert len(commands) >= 6
        outputs = {}  # the command's first words -> what it printed
        for argv in commands:
            argv = [a.replace("{prod}", "{" + redis_ns + "}") for a in argv]
            assert argv[0] == "redis-cli"
            if "|" in argv:  # a shell pipe in the README: run the redis-cli part
                argv = argv[: argv.index("|")]
            out = subprocess.run(
                [cli, "-p", str(redis_server.port), *argv[1:]],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            )
            assert "ERR" not in out.stdout, (argv, out.stdout)
            outputs[" ".join(argv[1:4]).replace(redis_ns, "NS")] = out.stdout
    assert outputs["ZCARD duetime:{NS}:due:default"].strip() == "1"  # hourly-report waits
    assert "hourly-report" in outputs["ZRANGE duetime:{NS}:due:default 0"]
    assert "tests.noop" in outputs["HGETALL duetime:{NS}:job:hourly-report"]
    assert "succeeded" in outputs["XREVRANGE duetime:{NS}:events +"]
    assert "job:hourly-report" in outputs["--scan --pattern duetime:{NS}:job:*"]
    assert "replica:" in outputs["--scan --pattern duetime:{NS}:replica:*"]
