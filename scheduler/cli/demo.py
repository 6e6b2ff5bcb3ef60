"""``duetime demo``: the product in one command, shared (Redis) or in-process."""

from __future__ import annotations

import logging
import threading
import time

import click

from scheduler.api import JobScheduler, RecurringJobScheduler
from scheduler.cli.app import (
    EXIT_REFUSED,
    FiniteRange,
    main,
    preflight,
    redis_url_or_embedded,
    timeout_option,
)


def _no_shared_demo(server: object) -> str | None:
    """Why the shared demo cannot run here without a URL (None: it can)."""
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the Redis client is not installed (pip install 'redis[hiredis]>=5.0.2')"
    if server is None:
        from scheduler.embedded import INSTALL_HINT

        return f"no redis-server found ({INSTALL_HINT})"
    return None


@main.command()
@click.option(
    "--redis",
    "redis_url",
    envvar="DUETIME_REDIS_URL",
    default=None,
    metavar="URL",
    help="Run against this Redis (default: an embedded local server).",
)
@timeout_option
@click.option(
    "--seconds",
    type=FiniteRange(0.5, 3600),
    default=6.0,
    show_default=True,
    help="How long jobs are produced (a replica is killed a third of the way in).",
)
@click.option("--in-process", is_flag=True, help="The in-process engine only (no Redis).")
def demo(redis_url: str | None, seconds: float, in_process: bool) -> None:
    """Show duetime in one command: a Redis (embedded unless --redis), three replica
    processes and a producer; one replica is killed with SIGKILL while it runs jobs; the
    proof: nothing lost, nothing run twice except the killed replica's in-flight work,
    which the others took over. Exit 1 if the proof fails.

    Without a Redis server (or the Redis client) on this machine it falls back to
    --in-process. --redis defaults to $DUETIME_REDIS_URL when set."""
    from scheduler.embedded import find_server
    from scheduler.stores.redis.protocol.urls import safe as safe_url

    why = None if in_process or redis_url else _no_shared_demo(find_server())
    if in_process or why:
        if why:
            click.echo(f"{why}; showing the in-process engine instead\n")
        _demo_in_process(seconds)
        return
    from scheduler.cli import demo_shared

    if redis_url:  # given, or from DUETIME_REDIS_URL: say which server the demo writes to
        click.echo(f"using the Redis at {safe_url(redis_url)} (--redis or DUETIME_REDIS_URL)")
    with redis_url_or_embedded(redis_url) as url:
        preflight(url)
        report = demo_shared.run(url, seconds=seconds, echo=click.echo)
    click.echo(
        f"\n{report.invocations} invocations, {report.executions} executions, "
        f"{report.completed} completed; replica {report.killed_pid} was killed while it ran "
        f"{len(report.in_flight)}."
    )
    for e in report.reruns:
        click.echo(
            f"  {e['inv']}: re-run by {e['pid']} with attempt {e['attempt']} "
            f"(fence {e['fence']}) after the killed owner's lease expired"
        )
    for what, items in (
        ("lost (enqueued, never ran)", report.lost),
        ("run twice without a takeover", report.doubled),
        ("repeated, not as a takeover", [e["inv"] for e in report.bad_reruns]),
    ):
        if items:
            click.echo(f"  {what}: {', '.join(items)}")
    click.echo(
        "OK: nothing lost, nothing doubled: each invocation ran to its end, and ran again "
        "only as a takeover (attempt 2, higher fence) of work the killed replica had in "
        "flight, each piece of which was taken over."
        if report.ok
        else "FAILED: see above"
    )
    if not report.ok:
        raise SystemExit(EXIT_REFUSED)


def _demo_in_process(seconds: float) -> None:
    """One-off and fixed-rate jobs and a cancel, in this process."""
    logging.basicConfig(level=logging.CRITICAL)
    t0 = time.monotonic()
    lock = threading.Lock()
    starts: list[float] = []

    def note(text: str) -> None:
        with lock:
            starts.append(time.monotonic() - t0)
            click.echo(f"{starts[-1] * 1000:8.1f} ms  {text}")

    with JobScheduler(num_workers=4) as once, RecurringJobScheduler(num_workers=2) as rec:
        for delay in (0.5, 0.25, 1.0):
            once.schedule(lambda d=delay: note(f"one-off job due at {d * 1000:.0f} ms ran"), delay)
        doomed = once.schedule(lambda: note("this job was cancelled and never runs"), 0.75)
        click.echo(f"cancelled job {doomed}: {once.cancel(doomed)}")
        rec.schedule("tick", lambda: note("fixed-rate tick (every 500 ms from the anchor)"), 0.5)
        time.sleep(seconds)
        info = rec.engine.get("tick")
    click.echo(
        f"'tick' ran {info.runs} times; {len(starts)} job starts in {seconds:g}s, "
        "each at or after its due time."
    )
