"""Commands that steer a job of a namespace: ``cancel``, ``pause``, ``resume``, ``trigger``.
Each says what happened, and exits 1 when it had no effect."""

from __future__ import annotations

import click

from scheduler.cli import render
from scheduler.cli.app import (
    EXIT_REFUSED,
    fail,
    job_argument,
    job_id_of,
    main,
    namespace_option,
    open_namespace,
    with_url,
)
from scheduler.stores.redis.reading import namespaces, queries


def _steer(
    verb: str, redis_url: str | None, namespace: str, job_id: str, interrupt: bool = False
) -> None:
    """cancel / pause / resume: say what happened; exit 1 if it had no effect."""
    from scheduler.client import Client

    job_id = job_id_of(job_id)
    with open_namespace(verb, redis_url, namespace) as store:
        client = Client(store)
        done = {
            "cancel": lambda j: client.cancel(j, interrupt=interrupt),
            "pause": client.pause,
            "resume": client.resume,
            "trigger": client.trigger,
        }[verb](job_id)
        info = store.get(job_id)
        now = queries.redis_now(store)
        hint = "" if info is not None else namespaces.hint(store, namespace)
    running = len(info.running) if info is not None else 0
    if done or (interrupt and running):
        extra = ""
        if info is not None and verb == "resume" and info.next_run is not None:
            extra = f", next run {render.when(info.next_run, now)}"
        if running and interrupt:
            extra += (
                f"; {running} running invocation(s) asked to stop (at their replica's next "
                "lease renewal, within a third of the lease)"
            )
        elif running and verb == "cancel":
            extra += f"; {running} running invocation(s) may finish (--interrupt stops them)"
        elif running and verb == "pause":
            extra += f"; {running} running invocation(s) may finish"
        past = {
            "cancel": "cancelled",
            "pause": "paused",
            "resume": "resumed",
            "trigger": "triggered a run of",
        }[verb]
        said = f"{past} job {job_id!r}" if done else f"job {job_id!r} has no run to come"
        click.echo(said + extra)
        return
    if verb == "cancel" and running:
        fail(
            f"nothing more to cancel: job {job_id!r} has no run to come; its {running} "
            "running invocation(s) may finish (--interrupt asks them to stop)",
            EXIT_REFUSED,
        )
    if info is None:
        fail(f"no job with id {job_id!r} in namespace {namespace!r}{hint}", EXIT_REFUSED)
    why = {
        "pause": "already paused" if info.state == "paused" else info.state,
        "resume": f"not paused (it is {info.state})",
    }.get(verb, info.state)
    click.echo(f"nothing to {verb}: job {job_id!r} is {why}", err=True)
    raise SystemExit(EXIT_REFUSED)


@main.command()
@with_url
@namespace_option
@job_argument
@click.option(
    "--interrupt",
    is_flag=True,
    help="Also ask its running invocations to stop (cancelled() turns true; an async "
    "job's task is cancelled), at their replica's next lease renewal.",
)
def cancel(redis_url: str | None, namespace: str, job_id: str, interrupt: bool) -> None:
    """Cancel job ID.

    No invocation of it starts any more (a running one may finish, unless --interrupt).
    Exit 0 if this prevented a start or asked a running invocation to stop, else 1
    (unknown, finished or cancelled job, or a running one-off without --interrupt)."""
    _steer("cancel", redis_url, namespace, job_id, interrupt)


@main.command()
@with_url
@namespace_option
@job_argument
def trigger(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Run job ID once now, outside its schedule (recorded as "triggered").

    A recurring job's schedule is unchanged; a one-off's run is brought forward (it runs
    once). Exit 1 if the job is unknown, finished or cancelled, or a one-off that is
    paused, running or waiting for a retry."""
    _steer("trigger", redis_url, namespace, job_id)


@main.command()
@with_url
@namespace_option
@job_argument
def pause(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Pause job ID until resume.

    Exit 1 if the job is unknown, finished, cancelled or already paused."""
    _steer("pause", redis_url, namespace, job_id)


@main.command()
@with_url
@namespace_option
@job_argument
def resume(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Resume paused job ID.

    Occurrences missed while paused follow the job's misfire policy. Exit 1 if the job
    is unknown or not paused."""
    _steer("resume", redis_url, namespace, job_id)
