"""`duetime run` starts only when told where, and with something to run (issue 30, item 1):
no URL is one line and exit 2 (never a private embedded Redis that nobody else sees);
`--embedded` is the explicit throwaway server, which ends with the process even when that
process is SIGKILLed, its data dir swept at the next start; a replica with no task
refuses (exit 2) unless `--allow-no-tasks`. Real processes on real redis-servers.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.cli import main
from scheduler.embedded import find_server, spawn_tied
from tests.faults.fleet import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RUNNING = "running namespace"  # the replica's INFO line once it claims
STARTED = re.compile(r"started an embedded Redis \(.*\) at (redis://\S+) \(data in (.+)\)$")


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DUETIME_")}
    return {**base, "PYTHONPATH": str(ROOT), **extra}


class Run:
    """``python -m scheduler run ...`` with its stderr read line by line on a thread: the
    test waits for a line (an event), or for the exit."""

    def __init__(self, args: list[str], cwd: Path, environ: dict[str, str]) -> None:
        self.proc = spawn_tied(
            [sys.executable, "-m", "scheduler", "run", *args],
            cwd=cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.eof = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, text: str, timeout: float = 60) -> str | None:
        """The first stderr line holding ``text``; None if the process ended first."""
        while not self.eof:
            line = self.lines.get(timeout=timeout)
            if line is None:
                self.eof = True
                return None
            self.seen.append(line)
            if text in line:
                return line
        return None

    def rest(self, timeout: float = 60) -> list[str]:
        """Every stderr line until the process ends (and it ends)."""
        while not self.eof:
            line = self.lines.get(timeout=timeout)
            if line is None:
                self.eof = True
            else:
                self.seen.append(line)
        self.proc.wait(timeout)
        return self.seen

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.close()


def ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie, dead but not yet reaped, counts)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def server_pid(url: str) -> int:
    import redis

    with redis.Redis.from_url(url, socket_timeout=5) as client:
        return int(client.info("server")["process_id"])


def test_run_without_a_url_refuses_in_one_line(tmp_path, runs):
    """Without --redis and DUETIME_REDIS_URL, `duetime run` started an embedded Redis and
    reported itself running: a unit whose variable is missing served an empty Redis."""
    run = Run(["--import", "tests.helpers"], tmp_path, env())
    runs.append(run)
    lines = run.rest()
    assert run.proc.returncode == 2, lines
    assert lines == [
        "error: run needs --redis URL (or DUETIME_REDIS_URL); --embedded starts a "
        "throwaway local server instead"
    ]


@pytest.mark.parametrize("source", ["option", "environment"])
def test_embedded_and_a_url_are_refused_in_one_line(source, monkeypatch):
    monkeypatch.delenv("DUETIME_REDIS_URL", raising=False)
    args = ["run", "--embedded", "--import", "tests.helpers"]
    if source == "option":
        result = CliRunner().invoke(main, [*args, "--redis", "redis://127.0.0.1:1/0"])
        expected = "error: run: give --redis URL or --embedded (a throwaway local server), not both"
    else:
        result = CliRunner().invoke(main, args, env={"DUETIME_REDIS_URL": "redis://127.0.0.1:1/0"})
        expected = "error: run: --embedded starts a throwaway local server, but DUETIME_REDIS_URL"
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1 and result.output.startswith(expected)


def test_data_dir_without_embedded_is_refused(tmp_path):
    """--data-dir was ignored when a URL was given (it names the embedded server's data)."""
    result = CliRunner().invoke(
        main,
        ["run", "--redis", "redis://127.0.0.1:1/0", "--data-dir", str(tmp_path)],
        env={"DUETIME_REDIS_URL": None},
    )
    assert result.exit_code == 2, result.output
    assert (
        result.output == "error: run: --data-dir applies to --embedded only (the server's data)\n"
    )


@pytest.mark.parametrize("imports", [[], ["--import", "json"]])
def test_a_replica_with_no_task_refuses_to_start(imports, private_redis, tmp_path, runs):
    """A replica without --import (or whose modules define no task) claimed the fleet's
    jobs and failed each one as an unknown task, burning attempts."""
    run = Run(["--redis", private_redis.url, *imports], tmp_path, env())
    runs.append(run)
    assert run.until(RUNNING) is None, run.seen  # it ended instead of running
    lines = run.rest()
    assert run.proc.returncode == 2, lines
    why = "no --import given" if not imports else "the modules imported define none"
    assert lines == [
        f"error: no task is registered ({why}): give --import MODULE for each module that "
        "defines your @task functions (--path DIR if it is not importable from here), or "
        "--allow-no-tasks for a replica that runs none"
    ]


def test_allow_no_tasks_runs_a_replica_with_a_warning(private_redis, tmp_path, runs):
    run = Run(["--redis", private_redis.url, "--allow-no-tasks"], tmp_path, env())
    runs.append(run)
    assert run.until(RUNNING) is not None, run.seen
    assert any("no task is registered (no --import given; --allow-no-tasks)" in x for x in run.seen)
    run.proc.send_signal(signal.SIGTERM)
    run.rest()
    assert run.proc.returncode == 0, run.seen


@pytest.mark.skipif(find_server() is None, reason="no redis-server to embed")
def test_a_killed_embedded_run_leaves_no_server_and_its_dir_is_swept(tmp_path, runs):
    """A SIGKILLed `duetime run` left its embedded redis-server running, orphaned, with
    its data dir in the temp folder. Now the server ends with it (prctl on Linux; the
    sweep elsewhere), and the next embedded start removes the dead owner's dir."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    run = Run(["--embedded", "--import", "tests.helpers"], tmp_path, env(TMPDIR=str(temp)))
    runs.append(run)
    started = run.until("started an embedded Redis")
    match = STARTED.search(started or "")
    assert match, run.seen
    url, data_dir = match.group(1), Path(match.group(2))
    assert data_dir.parent == temp and data_dir.is_dir()
    assert run.until(RUNNING) is not None, run.seen  # its threads run: workers, timers, ...
    pid = server_pid(url)
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    # the event: the replica's death; the bound: generous, never a guess at machine speed
    assert wait_until(lambda: ended(pid), 30), f"redis-server {pid} outlived its SIGKILLed parent"
    # the next embedded server started as this user in this temp folder sweeps the dir
    second = Run(["--embedded", "--import", "tests.helpers"], tmp_path, env(TMPDIR=str(temp)))
    runs.append(second)
    assert second.until(RUNNING) is not None, second.seen
    assert not data_dir.exists()
    second.proc.send_signal(signal.SIGTERM)  # a clean stop removes its own dir
    second.rest()
    assert second.proc.returncode == 0, second.seen
    assert list(temp.iterdir()) == []


def test_a_path_or_a_data_dir_that_is_not_a_directory_is_one_line(tmp_path):
    """--path that is not a folder and --data-dir on a file or under a missing parent:
    refused in one line naming the path (a typo was created, or ignored)."""
    afile = tmp_path / "afile"
    afile.write_text("")
    (tmp_path / "where_mods.py").write_text(
        "from scheduler import task\n\n\n@task('where.one')\ndef one() -> None: ...\n"
    )
    missing = tmp_path / "no" / "such" / "dir"
    mods = ["--embedded", "--import", "where_mods", "--path", str(tmp_path)]
    for argv, said in (
        (["--path", str(tmp_path / "nowhere")], "is not a directory"),
        (["--data-dir", str(afile)], f"not a directory ({afile})"),
        (["--data-dir", str(missing)], f"No such file or directory ({missing})"),
    ):
        r = CliRunner().invoke(main, ["run", *mods, *argv], env=env())
        assert r.exit_code == 2, (argv, r.output)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (argv, lines)
    assert not missing.parent.exists()
