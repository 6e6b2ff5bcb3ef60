"""A Ctrl-C while ``duetime run`` starts (the first ~0.3 s: the command line's own modules
load, then the ``--import`` task modules) ends the process quietly with 130, as an
interrupt of any command does: no KeyboardInterrupt traceback. Real processes; the
interrupt is sent while a module's import sleeps, so it lands inside that import."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# The console script's own program (`from scheduler.cli import main; sys.exit(main())`),
# with an import hook that says "loading" and sleeps when scheduler.cli.web is imported:
# the last of the commands, so the interrupt lands while the command line loads.
SLOW_CLI = textwrap.dedent(
    """
    import sys, time

    class Slow:
        def find_spec(self, name, path=None, target=None):
            if name == "scheduler.cli.web":
                print("loading", flush=True)
                time.sleep(30)
            return None

    sys.meta_path.insert(0, Slow())
    from scheduler.cli import main
    sys.exit(main())
    """
)


def interrupted(program: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``program`` until it prints "loading", then send SIGINT; what it left."""
    (tmp_path / "slow_tasks.py").write_text(
        "import time\nprint('loading', flush=True)\ntime.sleep(30)\n"
    )
    argv = [*program, "run", "--redis", "redis://127.0.0.1:9", "--import", "slow_tasks"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "loading"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.parametrize(
    "program",
    [
        pytest.param([sys.executable, "-c", SLOW_CLI], id="while-the-cli-loads"),
        pytest.param([sys.executable, "-m", "scheduler"], id="while-a-task-module-imports"),
    ],
)
def test_a_ctrl_c_while_run_starts_exits_130_without_a_traceback(program, tmp_path):
    done = interrupted(program, tmp_path)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert done.stderr == ""
