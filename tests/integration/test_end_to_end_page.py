"""docs/end-to-end.md ("Your app, end to end"), run as a user would follow it.

Every fenced block of the page carries a marker, an HTML comment on the last non-blank
line before it (invisible in the rendered page), that says what the test does with it:

- ``<!-- e2e: file PATH -->``: written to PATH in a fresh project directory;
- ``<!-- e2e: run NAME -->``: each command run there with bash, in page order; it must
  exit 0, and the checks of NAME (below) hold before and after it;
- ``<!-- e2e: start NAME -->``: each line a long-running process (a terminal of its own
  on the page), started in the background and stopped at the end;
- ``<!-- e2e: redis -->``: the ``redis-server`` line; the test starts a private server
  (``EmbeddedRedis``) with the line's options instead, on a free port;
- ``<!-- e2e: env -->``: the ``export`` line, applied to every command's environment;
- ``<!-- e2e: excerpt FILE -->``: lines quoted from FILE (under the repository), found
  there in order; the ``duetime`` command lines among them must parse;
- ``<!-- e2e: skip REASON -->``: not run (installs, Docker, systemd); its ``pip`` extras
  must exist and its ``duetime`` lines must parse.

The only change made to what the page says is the ports: 6379 (Redis), 8000 (the web
app), 8080 (the console), 9100 and 9101 (the replicas' metrics) become free ports, so the
test can run beside others. The namespace is the page's own, on a server of the test's own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import click
import pytest

from scheduler import Client, JobInfo
from scheduler.cli import main
from scheduler.embedded import INSTALL_HINT, EmbeddedRedis, find_server, spawn_tied
from tests.faults.fleet import wait_until
from tests.redis_fixtures import unavailable

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "end-to-end.md"
MARK = re.compile(r"^<!-- e2e: ([a-z]+)(?: (.*?))? -->$")
KINDS = ("file", "run", "start", "redis", "env", "excerpt", "skip")
PORTS = (6379, 8000, 8080, 9100, 9101)  # the page's ports, moved to free ones
DEADLINE = 20.0  # seconds any one awaited outcome may take (a bound, never a sleep)


@dataclass(frozen=True)
class Block:
    kind: str
    arg: str
    lang: str
    body: str
    line: int  # of the opening fence, for messages

    def commands(self) -> list[str]:
        """The block's command lines: continuations joined, blank lines and comments out."""
        joined = self.body.replace("\\\n", " ")
        return [c.strip() for c in joined.splitlines() if c.strip() and not c.startswith("#")]


def page_blocks() -> list[Block]:
    """Every fenced block of the page with its marker; a block without one is an error."""
    lines = PAGE.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)", lines[i])
        if not fence:
            i += 1
            continue
        before = [x for x in lines[:i] if x.strip()]
        mark = MARK.match(before[-1]) if before else None
        assert mark and mark.group(1) in KINDS, (
            f"docs/end-to-end.md:{i + 1}: a code block without an e2e marker "
            f"(<!-- e2e: {'|'.join(KINDS)} ... -->) on the line before it"
        )
        end = lines.index("```", i + 1)
        body = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(mark.group(1), mark.group(2) or "", fence.group(1), body, i + 1))
        i = end + 1
    return blocks


def parse_duetime(argv: list[str]) -> dict[str, Any]:
    """Parse a duetime command line with click, as the CLI would, without running it."""
    assert Path(argv[0]).name == "duetime", argv
    group = main.make_context("duetime", list(argv[1:]))
    command = main.get_command(group, argv[1])
    if command is None:
        raise click.UsageError(f"no such command {argv[1]!r}")
    return command.make_context(argv[1], list(argv[2:]), parent=group).params


def duetime_lines(block: Block) -> list[list[str]]:
    """The duetime command lines of a block: shell lines, a unit's ExecStart, a
    Dockerfile's CMD or a compose command (entrypoint ``duetime``)."""
    found = []
    for line in block.commands():
        words = shlex.split(line.split(" #")[0])
        if words[:1] == ["duetime"]:
            found.append(words)
        elif line.startswith("ExecStart="):
            found.append(shlex.split(line.removeprefix("ExecStart=")))
        elif line.startswith("CMD ["):
            found.append(["duetime", *json.loads(line.removeprefix("CMD "))])
    for command in re.findall(r"command: (\[.*?\])", block.body, re.S):
        found.append(["duetime", *json.loads(command)])
    return found


def normalized(line: str) -> str:
    """A line as an excerpt compares it: no indentation, no comment marker before it, no
    trailing comment after it (a Dockerfile reads one as arguments, so the page drops it)."""
    line = line.strip()
    line = line.removeprefix("#").strip() if not line.startswith("#!") else line
    return re.sub(r"\s+#\s.*$", "", line)


# ---- the page's blocks, without Redis ---------------------------------------------------


def test_every_block_is_marked_and_the_walk_has_its_steps() -> None:
    blocks = page_blocks()
    kinds = [b.kind for b in blocks]
    assert kinds.count("redis") == kinds.count("env") == 1
    names = [b.arg for b in blocks if b.kind in ("run", "start")]
    assert len(names) == len(set(names)), f"run/start names repeat: {names}"
    assert set(names) == set(CHECKS) | {"replicas", "web-app", "console"}, names
    files = {b.arg for b in blocks if b.kind == "file"}
    assert files == {"myapp/tasks.py", "myapp/web.py", "schedule.py"}


def test_excerpts_are_in_the_files_they_quote() -> None:
    excerpts = [b for b in page_blocks() if b.kind == "excerpt"]
    assert {b.arg for b in excerpts} == {
        "deploy/Dockerfile",
        "deploy/docker-compose.yml",
        "deploy/duetime.service",
    }
    for block in excerpts:
        path = ROOT / block.arg
        assert path.is_file(), f"line {block.line}: {block.arg} does not exist"
        have = [normalized(x) for x in path.read_text().splitlines()]
        want = [normalized(x) for x in block.body.splitlines() if x.strip()]
        at = [i for i in range(len(have)) if have[i : i + len(want)] == want]
        assert at, f"docs/end-to-end.md:{block.line}: not found in {block.arg}:\n{block.body}"


def test_deploy_and_skipped_command_lines_parse() -> None:
    parsed = []
    for block in page_blocks():
        if block.kind not in ("excerpt", "skip"):
            continue
        for argv in duetime_lines(block):
            try:
                params = parse_duetime(argv)
            except click.ClickException as exc:
                pytest.fail(f"line {block.line}: {shlex.join(argv)}: {exc.format_message()}")
            assert params.get("imports") in (None, ("myapp.tasks",)), argv
            parsed.append(argv[1])
    assert parsed.count("run") == 3  # the Dockerfile's CMD, compose's and systemd's


def test_the_install_line_names_extras_that_exist() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    pips = [
        c for b in page_blocks() if b.kind == "skip" for c in b.commands() if "pip install" in c
    ]
    assert len(pips) == 1, pips
    named = re.search(r"\[([\w,]+)\]", pips[0])
    assert named, pips[0]
    for extra in named.group(1).split(","):
        assert extra in extras, f"{pips[0]}: no extra {extra!r} in pyproject.toml"
    for package in pips[0].split()[3:]:  # fastapi, ...: what the walk imports
        if not package.startswith("'"):
            pytest.importorskip(package)


# ---- the walk ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


class Walk:
    """The project directory, the environment the page builds, what has run."""

    def __init__(self, project: Path, ports: dict[int, int]) -> None:
        self.project = project
        self.ports = ports
        bindir = os.path.dirname(sys.executable)  # duetime, uvicorn: the test's environment
        self.env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        for var in ("DUETIME_REDIS_URL", "DUETIME_NAMESPACE", "PYTHONPATH"):
            self.env.pop(var, None)
        self.out: dict[str, list[str]] = {}  # run block -> each command's stdout
        self.procs: dict[str, subprocess.Popen[Any]] = {}
        self.logs: dict[str, Path] = {}

    def local(self, text: str) -> str:
        pattern = r"(?<![\d.])(" + "|".join(map(str, self.ports)) + r")(?![\d.])"
        return re.sub(pattern, lambda m: str(self.ports[int(m.group(1))]), text)

    def port(self, page_port: int) -> int:
        return self.ports[page_port]

    def run(self, block: Block) -> None:
        outs = self.out.setdefault(block.arg, [])
        for command in block.commands():
            done = subprocess.run(
                ["bash", "-c", self.local(command)],
                cwd=self.project,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, (
                f"docs/end-to-end.md:{block.line}: `{command}` exited {done.returncode}\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
            outs.append(done.stdout)

    def start(self, block: Block) -> None:
        for n, command in enumerate(block.commands(), 1):
            name = f"{block.arg}-{n}"
            log = self.project / f"{name}.log"
            with open(log, "wb") as fh:
                self.procs[name] = spawn_tied(
                    ["bash", "-c", "exec " + self.local(command)],
                    cwd=self.project,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            self.logs[name] = log

    def export(self, block: Block) -> None:
        (command,) = block.commands()
        words = shlex.split(self.local(command))
        assert words[0] == "export", command
        for word in words[1:]:
            name, _, value = word.partition("=")
            self.env[name] = value

    def alive(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        assert not dead, f"exited early: {dead}\n" + "\n".join(
            f"--- {n}\n{self.logs[n].read_text()[-3000:]}" for n in dead
        )

    def wait(self, what: str, predicate: Callable[[], Any]) -> None:
        def ok() -> bool:
            self.alive()
            return bool(predicate())

        assert wait_until(ok, DEADLINE), f"not within {DEADLINE:.0f}s: {what}"

    def job(self, job_id: str) -> JobInfo:

        with Client(self.env["DUETIME_REDIS_URL"], namespace=self.env["DUETIME_NAMESPACE"]) as c:
            return c.get(job_id)

    def stop(self) -> dict[str, int]:
        """Ctrl-C each process, as a user ends a terminal's command; their exit codes."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes


# What the page says happens, checked around each run block: (before, after). "before"
# waits (with a deadline) for what the page says has happened by then; "after" checks the
# commands' output against what the page says they print.


def _before_post_report(w: Walk) -> None:
    w.wait("the web app accepts connections", lambda: accepts(w.port(8000)))


def _after_post_report(w: Walk) -> None:
    assert json.loads(w.out["post-report"][0]) == {"job_id": "report-7"}


def _after_enqueue_shell(w: Walk) -> None:
    assert [o.strip() for o in w.out["enqueue-shell"]] == ["hello-shell", "hello-later"]
    later = w.job("hello-later")
    assert later.state == "scheduled" and later.next_run is not None
    assert later.schedule == "once after 60s", later.schedule


def _before_watch(w: Walk) -> None:
    def report_retried() -> bool:
        info = w.job("report-7")
        return info.state == "succeeded" and info.attempts == 2

    w.wait("report-7 succeeded at its second attempt", report_retried)
    w.wait("hello-shell ran", lambda: w.job("hello-shell").state == "succeeded")
    w.wait("the heartbeat ran at least twice", lambda: w.job("heartbeat").runs >= 2)
    w.wait(
        "both replicas are ready",
        lambda: all(http(f"http://127.0.0.1:{w.port(p)}/readyz")[0] == 200 for p in (9100, 9101)),
    )


def _after_watch(w: Walk) -> None:
    ls, ls_all, show, stats, events, cron_show = w.out["watch"]
    listed = {line.split()[0] for line in ls.splitlines()[1:] if line.strip()}
    assert listed == {"heartbeat", "hello-later", "weekday-report"}, ls
    finished = {line.split()[0]: line for line in ls_all.splitlines()[1:] if line.strip()}
    for job in ("report-7", "hello-shell"):
        assert job in finished and " succeeded " in finished[job], ls_all
    assert re.search(r"(?m)^last attempt +2$", show), show
    assert re.search(r"(?m)^\s+\S+\s+retried\s+report-7 .*attempt 1 .*warming up$", show), show
    assert re.search(r"(?m)^\s+\S+\s+succeeded\s+report-7 .*attempt 2$", show), show
    assert re.search(r"(?m)^replicas +2 alive", stats), stats
    kinds = [line.split()[1] for line in events.splitlines() if line.strip()]
    assert kinds[0] == "scheduled" and kinds[-1] == "succeeded", events
    assert kinds.count("claimed") >= 2 and "retried" in kinds, events
    cron = w.job("weekday-report")
    assert cron.next_run is not None, cron
    paris = datetime.fromtimestamp(cron.next_run, ZoneInfo("Europe/Paris"))
    assert (paris.weekday() < 5, paris.hour, paris.minute, paris.second) == (True, 9, 0, 0)
    utc = datetime.fromtimestamp(cron.next_run, ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M")
    assert re.search(rf"(?m)^next run +{utc}:00\.000\+00:00", cron_show), cron_show


def _before_console_api(w: Walk) -> None:
    w.wait("the console accepts connections", lambda: accepts(w.port(8080)))


def _after_console_api(w: Walk) -> None:
    overview = json.loads(w.out["console-api"][0])
    assert overview["namespace"] == "myapp"
    assert overview["replicas_alive"] == 2
    assert {"queued", "running", "counters"} <= overview.keys()
    status, _ = http(f"http://127.0.0.1:{w.port(8080)}/")  # the browser's page (redirected)
    assert status == 200


def _after_metrics(w: Walk) -> None:
    ready, metrics = w.out["metrics"]
    assert ready.startswith("ready: the last claim round reached the store"), ready
    assert re.search(r'(?m)^duetime_replicas_alive\{namespace="myapp"\} 2\.0$', metrics), metrics
    assert re.search(r'(?m)^duetime_queue_depth\{lane="default",namespace="myapp"\}', metrics)


def _before_dead_letter(w: Walk) -> None:
    w.wait("import-prices is dead-lettered", lambda: w.job("import-prices").state == "failed")


def _after_dead_letter(w: Walk) -> None:
    dead, show = w.out["dead-letter"]
    rows = [line for line in dead.splitlines()[1:] if line.strip()]
    assert (
        len(rows) == 1 and rows[0].startswith("import-prices ") and "FileNotFoundError" in rows[0]
    )
    assert re.search(r"(?m)^state +failed$", show), show
    assert re.search(r"(?m)^last attempt +2$", show), show
    assert "Traceback (most recent call last)" in show
    assert re.search(r"(?m)^dead letters \(recent first\)\n .*attempt 2: FileNotFoundError", show)


def _after_retry(w: Walk) -> None:
    assert "retried job 'import-prices'" in w.out["retry"][1], w.out["retry"]


def _before_after_retry(w: Walk) -> None:
    w.wait("import-prices succeeded", lambda: w.job("import-prices").state == "succeeded")


def _after_after_retry(w: Walk) -> None:
    show, dead = w.out["after-retry"]
    assert re.search(r"(?m)^state +succeeded$", show), show
    assert re.search(r"(?m)^last result +2$", show), show
    assert re.search(r"(?m)^dead letters none$", show), show
    assert dead.strip() == "no dead jobs in namespace 'myapp'", dead


def _nothing(w: Walk) -> None:
    pass


CHECKS: dict[str, tuple[Callable[[Walk], None], Callable[[Walk], None]]] = {
    "package": (_nothing, _nothing),
    "post-report": (_before_post_report, _after_post_report),
    "enqueue-shell": (_nothing, _after_enqueue_shell),
    "schedule": (_nothing, _nothing),
    "schedule-shell": (_nothing, _nothing),
    "watch": (_before_watch, _after_watch),
    "console-api": (_before_console_api, _after_console_api),
    "metrics": (_nothing, _after_metrics),
    "import-prices": (_nothing, _nothing),
    "dead-letter": (_before_dead_letter, _after_dead_letter),
    "retry": (_nothing, _after_retry),
    "after-retry": (_before_after_retry, _after_after_retry),
}


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    if find_server() is None:
        unavailable(f"no redis-server found: {INSTALL_HINT}")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("prometheus_client")
    (redis_line,) = next(b for b in page_blocks() if b.kind == "redis").commands()
    words = shlex.split(redis_line)
    at = words.index("--port")
    assert words[0] == "redis-server" and words[at + 1] == "6379", redis_line
    server = EmbeddedRedis(extra_args=words[1:at] + words[at + 2 :])  # the page's options
    server.start()
    project = tmp_path / "myapp-demo"
    project.mkdir()
    w = Walk(project, {6379: server.port, **{p: free_port() for p in PORTS if p != 6379}})
    try:
        yield w
    finally:
        w.stop()
        server.stop()


@pytest.mark.redis
@pytest.mark.slow
def test_the_page_runs_as_written(walk: Walk) -> None:
    """Every block, in page order, with the page's claims checked between them."""
    for block in page_blocks():
        if block.kind == "file":
            path = walk.project / block.arg
            assert path.parent.is_dir(), f"{block.arg}: the page writes it before its folder"
            path.write_text(block.body)
        elif block.kind == "env":
            walk.export(block)
        elif block.kind == "start":
            walk.start(block)
        elif block.kind == "run":
            before, after = CHECKS[block.arg]
            before(walk)
            walk.alive()
            walk.run(block)
            after(walk)
    # the first attempt's failure, in a replica's log, as the page says (with its traceback)
    logs = [walk.logs["replicas-1"], walk.logs["replicas-2"]]
    walk.wait(
        "a replica logged the retried failure",
        lambda: any(
            re.search(r"WARNING .*\n(?:.*\n)*?ConnectionError: the reports database", p.read_text())
            for p in logs
        ),
    )
    codes = walk.stop()
    assert codes["replicas-1"] == codes["replicas-2"] == 0, codes  # Ctrl-C: a clean stop
