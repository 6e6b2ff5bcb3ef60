"""The ``duetime`` command line (``python -m scheduler``).

Exit codes: 0 success, 1 a job-level failure was reported, 2 bad usage (click's own).
"""
from __future__ import annotations

import logging
import threading
import time

import click

from scheduler.api import JobScheduler, RecurringJobScheduler
from scheduler.engine import Scheduler


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="duetime")
def main() -> None:
    """duetime: run each job at its time, once."""


@main.command()
@click.option("--seconds", default=3.0, show_default=True, help="How long the demo runs.")
def demo(seconds: float) -> None:
    """Show the engine in one command: one-off and fixed-rate jobs, a cancel, a retry.

    With no Redis URL this uses the in-process store (no services needed)."""
    logging.basicConfig(level=logging.CRITICAL)
    t0 = time.monotonic()
    lock = threading.Lock()
    lines: list[tuple[float, str]] = []

    def note(text: str) -> None:
        with lock:
            lines.append((time.monotonic() - t0, text))
            click.echo(f"{lines[-1][0] * 1000:8.1f} ms  {text}")

    with JobScheduler(num_workers=4) as once, RecurringJobScheduler(num_workers=2) as rec:
        for delay in (0.5, 0.25, 1.0):
            once.schedule(lambda d=delay: note(f"one-off job due at {d * 1000:.0f} ms ran"), delay)
        doomed = once.schedule(lambda: note("this job was cancelled and never runs"), 0.75)
        click.echo(f"cancelled job {doomed}: {once.cancel(doomed)}")
        rec.schedule("tick", lambda: note("fixed-rate tick (every 500 ms from the anchor)"), 0.5)
        time.sleep(seconds)
        info = rec.engine.get("tick")
    click.echo(f"'tick' ran {info.runs} times, next run was {info.state}; "
               f"{len(lines)} job starts in {seconds:g}s, each at or after its due time.")


__all__ = ["Scheduler", "main"]
