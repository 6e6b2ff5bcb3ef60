"""Tasks that the process-lane tests run in worker processes (a module the children
import, as a replica's ``--import``)."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import time

from scheduler import current_invocation, task

log = logging.getLogger("tests.process_jobs")  # each job logs "started" (tests wait on it)


@task("proc.whoami")
def whoami(tag: str = "") -> dict:
    ctx = current_invocation()
    log.warning("started %s in %d", tag, os.getpid())
    return {
        "pid": os.getpid(),
        "tag": tag,
        "job_id": ctx.job_id,
        "attempt": ctx.attempt,
        "fence": ctx.fence,
        "lane": ctx.lane,
        "scheduled_ms": ctx.scheduled_ms,
        "cancelled": ctx.cancelled(),
    }


@task("proc.awhoami")
async def awhoami(tag: str = "") -> dict:
    await asyncio.sleep(0)
    ctx = current_invocation()
    return {"pid": os.getpid(), "tag": tag, "job_id": ctx.job_id, "attempt": ctx.attempt}


@task("proc.hang")
def hang(marker: str = "") -> None:
    """Blocks for an hour; on its stop, appends what it saw to ``marker`` (one line per
    run: job id, attempt, ``cancelled()``, ``cancel_reason``; the bench counts them)."""
    try:
        log.warning("started")  # inside: a stop right after it still runs the finally
        time.sleep(3600)
    finally:
        if marker:
            ctx = current_invocation()
            with open(marker, "a") as f:
                f.write(f"{ctx.cancelled()} {ctx.cancel_reason} {ctx.job_id} {ctx.attempt}\n")


@task("proc.ahang")
async def ahang() -> None:
    log.warning("started")
    await asyncio.sleep(3600)


@task("proc.stubborn")
def stubborn() -> None:
    """Ignores SIGTERM: only SIGKILL stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log.warning("started")
    time.sleep(3600)


@task("proc.boom")
def boom(message: str = "boom") -> None:
    raise ValueError(message)


@task("proc.exit")
def exit_now(code: int = 1) -> None:
    os._exit(code)


@task("proc.sigkill")
def sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@task("proc.segfault")
def segfault() -> None:
    ctypes.string_at(0)


@task("proc.grow")
def grow(mb: int = 64) -> int:
    global _held
    _held = bytearray(mb * 1024 * 1024)  # kept: the resident memory stays up
    return os.getpid()


_held = b""


@task("proc.spin")
def spin(n: int = 100_000) -> int:
    """A pure-Python loop of ``n`` steps (CPU-bound; tests/bench/bench_process_lanes.py
    sizes ``n`` to ~50 ms)."""
    total = 0
    for i in range(n):
        total += i % 7
    return total


@task("proc.notjson")
def notjson() -> object:
    return {1, 2}


@task("proc.progress")
def progress(value: object = None) -> str:
    """Reports ``value`` as its progress (a set: not JSON, refused in the job)."""
    current_invocation().progress(set() if value == "not json" else value)
    return "reported"
