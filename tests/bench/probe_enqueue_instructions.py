#!/usr/bin/env python3
"""The producer's instructions per one-by-one ``Client.enqueue`` (not a test; by hand).

A producer's CPU time per call moves by a third on this box from run to run (115 to 150
µs per call in one sitting); its instruction count does not. Each tree's producer runs
under valgrind's callgrind twice, enqueuing ``--small`` and then ``--small + --jobs``
jobs due in an hour (``at=``, or ``--delay``), against one private redis-server; the
difference over ``--jobs`` is what one more call costs in the producer's process (its
Python, redis-py and hiredis; not the kernel, not Redis), start-up and connection left
out. Trees are run in the order given, each from its own checkout (``PYTHONPATH``).

    PYTHONPATH=. python tests/bench/probe_enqueue_instructions.py [--jobs 1000]
        [--delay] --trees before=<another checkout>,this=.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_add_ablate import free_port  # noqa: E402

CHILD = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import scheduler
assert scheduler.__file__.startswith(sys.argv[1]), scheduler.__file__
from scheduler import Client
c = Client(f"redis://127.0.0.1:{sys.argv[2]}/0", namespace=f"p{os.getpid()}")
at, delay = time.time() + 3600, sys.argv[4] == "delay"
for i in range(int(sys.argv[3])):
    if delay:
        c.enqueue("t.x", delay=3600, kwargs={"i": i})
    else:
        c.enqueue("t.x", at=at, kwargs={"i": i})
"""


def collected(tree: str, port: int, n: int, how: str, out: str) -> int:
    """Instructions of one producer process enqueuing ``n`` jobs."""
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
         "-c", CHILD, tree, str(port), str(n), how],
        capture_output=True, text=True, cwd=tempfile.gettempdir(), check=True,
        env={**os.environ, "PYTHONPATH": tree},
    )  # fmt: skip
    m = re.search(r"Collected : (\d+)", run.stderr)
    assert m, run.stderr[-2000:]
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000, help="calls measured (default 1000)")
    ap.add_argument("--small", type=int, default=200, help="calls of the baseline run")
    ap.add_argument("--delay", action="store_true", help="enqueue(delay=) instead of at=")
    ap.add_argument("--trees", default="this=.", help="name=dir,... (default this=.)")
    a = ap.parse_args()
    trees = [t.split("=", 1) for t in a.trees.split(",")]
    for t in trees:
        if len(t) != 2 or not os.path.isfile(os.path.join(t[1], "scheduler", "__init__.py")):
            ap.error(f"--trees takes name=<a duetime checkout>,...: {'='.join(t)!r} is not one")
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not installed (apt-get install valgrind): the counts are callgrind's")
    how = "delay" if a.delay else "at"
    port, work = free_port(), tempfile.mkdtemp(prefix="enq-cg-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", work],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):  # until it answers
            ping = ["redis-cli", "-p", str(port), "ping"]
            if subprocess.run(ping, capture_output=True, text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        rows = []
        for name, tree in trees:
            tree = os.path.abspath(tree)
            small = collected(tree, port, a.small, how, os.path.join(work, "a.out"))
            big = collected(tree, port, a.small + a.jobs, how, os.path.join(work, "b.out"))
            rows.append((name, (big - small) / a.jobs))
    finally:
        server.terminate()
        server.wait()
    first = rows[0][1]
    print(f"producer instructions per enqueue({how}=), {a.jobs} calls (callgrind)")
    for name, n in rows:
        print(f"  {name:12s} {n:10,.0f}  x{n / first:.3f}")


if __name__ == "__main__":
    main()
