#!/usr/bin/env python3
"""The web console at scale: page response times with 10^6 pending jobs and 3 replicas,
and the console's load on Redis with one tab open at rest.

Not part of the test run. Typical use (a private redis-server, AOF off):

    PYTHONPATH=$PWD python tests/bench/bench_web.py --pending 1000000

1. Load N pending one-off jobs (due in 1-2 days) with ``Client.enqueue_many`` in batches
   of 5,000 (the time is printed), plus two recurring jobs (every 1 s and every 5 s) and
   20 failed ones.
2. Start 3 replicas (``duetime run --import tests.web.tasks``) and ``duetime web``.
3. Page time: R sequential GETs of each page over HTTP (uvicorn, loopback; the HTML page,
   rendered from the same data as its JSON), p50 / p99 / max in ms: the overview, the jobs
   list (first page, and a page 1,000 jobs deep by cursor), a pending job's detail (its
   events scan the whole capped stream: the worst case) and a recurring job's detail.
4. Load at rest: the replicas are stopped, one headless Chromium tab (Debian's, through
   Playwright) stays on the overview, then on the events page, for S seconds each;
   ``INFO commandstats`` before and after (the two INFO calls subtracted) / S.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from scheduler import Client  # noqa: E402
from scheduler.embedded import EmbeddedRedis  # noqa: E402

NS = "bench"
ENV = {**os.environ, "PYTHONPATH": ROOT}


def load(client: Client, n: int, batch: int = 5000) -> float:
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        client.enqueue_many(
            {
                "task": "tests.web.ok",
                "job_id": f"j{i}",
                "kwargs": {"order": i, "tag": "monthly"},
                "delay": 86_400 + i % 86_400,
            }
            for i in range(start, min(n, start + batch))
        )
    return time.perf_counter() - t0


def timed(url: str, rounds: int) -> dict[str, float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as reply:
            reply.read()
            assert reply.status == 200
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p99_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))], 1),
        "max_ms": round(times[-1], 1),
    }


def commands(r) -> int:
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


def at_rest(base: str, r, path: str, seconds: float) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(base + path)
        time.sleep(3)  # the page's own load is not "at rest"
        before = commands(r)
        time.sleep(seconds)
        after = commands(r)
        browser.close()
    return round((after - before - 1) / seconds, 2)  # the INFO that read `after`


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--rest", type=float, default=60.0)
    args = ap.parse_args()
    out: dict[str, object] = {"pending": args.pending}
    with EmbeddedRedis() as server:
        client = Client(server.url, namespace=NS)
        out["load_seconds"] = round(load(client, args.pending), 1)
        print(f"loaded {args.pending} pending jobs in {out['load_seconds']}s", flush=True)
        client.enqueue("tests.web.ok", every=1, job_id="tick")
        client.enqueue("tests.web.ok", every=5, job_id="tock")
        for n in range(20):
            client.enqueue("tests.web.boom", job_id=f"bad-{n}")
        replicas = [
            subprocess.Popen(
                [sys.executable, "-m", "scheduler", "run", "--redis", server.url, "-n", NS]
                + ["--import", "tests.web.tasks", "--workers", "4"],
                env=ENV,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(3)
        ]
        argv = [sys.executable, "-m", "scheduler", "web", "--redis", server.url, "-n", NS]
        web = subprocess.Popen([*argv, "--port", "0"], env=ENV, stderr=subprocess.PIPE, text=True)
        base = re.search(r"(http://\S+)/", web.stderr.readline()).group(1)
        time.sleep(15)  # replicas claim, fail the bad jobs, flush their minutes
        deep = json.loads(urllib.request.urlopen(f"{base}/api/ns/{NS}/jobs?state=scheduled").read())
        cursor = deep["cursor"]
        for _ in range(19):
            page = json.loads(
                urllib.request.urlopen(
                    f"{base}/api/ns/{NS}/jobs?state=scheduled&cursor={cursor}"
                ).read()
            )
            cursor = page["cursor"]
        pages = {
            "overview": f"{base}/ns/{NS}/",
            "jobs (first page)": f"{base}/ns/{NS}/jobs",
            "jobs (1,000 deep)": f"{base}/ns/{NS}/jobs?state=scheduled&cursor={cursor}",
            "job detail (pending)": f"{base}/ns/{NS}/job/j{args.pending // 2}",
            "job detail (recurring)": f"{base}/ns/{NS}/job/tick",
            "failed": f"{base}/ns/{NS}/failed",
        }
        out["pages"] = {name: timed(url, args.rounds) for name, url in pages.items()}
        for name, figures in out["pages"].items():
            print(name, figures, flush=True)
        for proc in replicas:
            proc.send_signal(signal.SIGTERM)
        for proc in replicas:
            proc.wait(60)
        r = client.store.redis
        out["at_rest_commands_per_s"] = {
            "overview": at_rest(base, r, f"/ns/{NS}/", args.rest),
            "events": at_rest(base, r, f"/ns/{NS}/events", args.rest),
        }
        print("at rest", out["at_rest_commands_per_s"], flush=True)
        web.send_signal(signal.SIGTERM)
        web.wait(10)
        client.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
