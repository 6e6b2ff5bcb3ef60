"""Commands that look at a namespace without changing it: ``ls``, ``show``, ``stats``,
``events`` and ``top``. The data comes from ``stores.redis.queries``; render.py draws it."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import click

from scheduler import limit_usage
from scheduler.cli import render
from scheduler.cli.app import (
    EXIT_REFUSED,
    FiniteRange,
    bad_input,
    fail,
    job_argument,
    job_id_of,
    json_option,
    main,
    namespace_option,
    open_namespace,
    with_url,
)
from scheduler.model import EVENT_KINDS
from scheduler.stores.redis.reading import console_history, fleet, listing, namespaces, queries

if TYPE_CHECKING:
    from scheduler.cli.app import AnyStore
    from scheduler.model import JobInfo
    from scheduler.stores.redis.reading.queries import Entry


@main.command("ls")
@with_url
@namespace_option
@click.option(
    "--state",
    type=click.Choice(listing.STATES),
    default="live",
    show_default=True,
    help="Jobs in this state (dead: with dead letters; live: scheduled, running or paused).",
)
@click.option("--task", default=None, help="Only jobs of this task (filters within pages).")
@click.option("--limit", type=click.IntRange(1, listing.MAX_LIMIT), default=50, show_default=True)
@click.option("--cursor", default=None, help="Go on from where an earlier page ended.")
@json_option
def ls(
    redis_url: str | None,
    namespace: str,
    state: str,
    task: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List jobs of one state, a page at a time.

    Scheduled jobs come soonest first, finished and dead ones newest first (finished jobs
    are kept for a day). When there is more, the last line gives the --cursor of the next
    page (--json: "cursor", null at the end). NEXT RUN: local time, and relative to Redis
    TIME. Exit 0 (also for an empty page), 2 for a bad option or cursor, 3 if Redis is
    unreachable or refuses."""

    with open_namespace("ls", redis_url, namespace) as store:
        try:
            page = listing.list_jobs(store, state, task=task, limit=limit, cursor=cursor)
        except ValueError as exc:
            bad_input(exc)
        now = queries.redis_now(store)
        serving = fleet.serving(store)
    jobs = page.jobs
    if state in ("scheduled", "live"):
        jobs = sorted(jobs, key=lambda i: (i.next_run is None, i.next_run or 0.0, i.job_id))
    waiting = {i.job_id: _waiting(i, serving) for i in jobs}
    if as_json:
        rows = [{**render.job_json(i), "waiting": waiting[i.job_id]} for i in jobs]
        click.echo(json.dumps({"state": state, "jobs": rows, "cursor": page.cursor}, indent=2))
        return
    if not jobs:
        click.echo(
            f"no {'more ' if cursor else ''}{state} jobs"
            + (f" of task {task!r}" if task else "")
            + f" in namespace {namespace!r}"
            + (" on this page" if page.cursor else "")
        )
    else:
        for line in _jobs_table(jobs, now, waiting):
            click.echo(line)
        for why in sorted({w for w in waiting.values() if w}):
            click.echo(f"waiting: {why}")
    if page.cursor:
        more = f" -n {shlex.quote(namespace)}" + (f" --task {shlex.quote(task)}" if task else "")
        more += f" --limit {limit}" if limit != 50 else ""
        click.echo(f"more: duetime ls{more} --state {state} --cursor {page.cursor}")


def _waiting(info: JobInfo, serving: fleet.Serving) -> str | None:
    """Why a scheduled job is not claimed when due (its task has no live replica), or None."""
    return serving.why_waiting(info.task) if info.state == "scheduled" else None


def _jobs_table(jobs: list[JobInfo], now: float, waiting: dict[str, str | None]) -> list[str]:
    rows = [
        [
            i.job_id,
            render.clip(i.task, 30),
            render.clip(i.args, 30),
            i.schedule,
            i.lane,
            render.state_text(i, waiting.get(i.job_id)),
            render.when(i.next_run, now),
            str(i.runs),
            str(i.failures),
            render.clip(i.last_error, 40),
        ]
        for i in jobs
    ]
    head = ["ID", "TASK", "ARGS", "SCHEDULE", "LANE", "STATE", "NEXT RUN", "SUCCEEDED", "FAILED"]
    head.append("LAST ERROR")
    return render.table(head, rows, right=frozenset({7, 8}))


@main.command()
@with_url
@namespace_option
@job_argument
@json_option
def show(redis_url: str | None, namespace: str, job_id: str, as_json: bool) -> None:
    """Show one job in full.

    Every field, the last error's traceback, the durations of recent runs (from the event
    stream), running invocations, recent skips (with reasons) and dead letters, and
    the last 20 events. Exit 1 if there is no such job (finished ones are kept a day)."""

    job_id = job_id_of(job_id)
    with open_namespace("show", redis_url, namespace) as store:
        info = store.get(job_id)
        if info is None:
            fail(
                f"no job with id {job_id!r} in namespace {namespace!r} (finished jobs are "
                f"kept for their result_ttl, a day by default){namespaces.hint(store, namespace)}",
                EXIT_REFUSED,
            )
        recent = queries.recent_events(store, 20, job_id)
        runs = queries.recent_runs(store, job_id)
        now = queries.redis_now(store)
        waiting = _waiting(info, fleet.serving(store))
        held = limit_usage.held(store, info)
    if as_json:
        events = [render.event_json(e.event, e.id) for e in recent]
        out = {**render.job_json(info), "waiting": waiting, "held": render.hold_json(held)}
        out.update(recent_runs=runs, events=events)
        click.echo(json.dumps(out, indent=2))
        return
    result = "-" if info.last_result is None else json.dumps(info.last_result)
    held_by = (
        []
        if held is None
        else [("held by", f"{held.describe()}, due {render.waited(held.waited)} ago")]
    )
    for label, value in (
        ("job", info.job_id),
        ("task", info.task or "-"),
        ("arguments", render.clip(info.args, 200) or "-"),
        ("schedule", info.schedule),
        ("lane", info.lane),
        ("priority", info.priority),
        ("limit key", info.limit_key or "-"),
        ("results kept", render.kept_for(info.result_ttl)),
        ("state", render.state_text(info) if waiting is None else f"waiting: {waiting}"),
        ("next run", render.when(info.next_run, now)),
        *held_by,
        ("succeeded", f"{info.runs} run(s)"),
        ("failed", f"{info.failures} run(s) (after their retries)"),
        ("last attempt", info.attempts or "-"),
        ("last result", render.clip(result, 200)),
        ("last error", info.last_error or "-"),
        ("progress", render.progress_text(info)),
        ("trace", info.trace_id or "-"),
    ):
        click.echo(f"{label:<13}{value}")
    if info.last_traceback:
        click.echo("traceback    (of the last error)")
        for line in info.last_traceback.rstrip().splitlines():
            click.echo(f"  {line}")
    click.echo(f"durations    {_durations(runs) if runs else 'none in the recent events'}")
    click.echo(f"running      {len(info.running) or 'none'}")
    for inv in info.running:
        click.echo(
            f"  scheduled {render.local(inv.scheduled)}  attempt {inv.attempt}  fence {inv.fence}"
            + _lease(inv.lease_until, now)
        )
    click.echo(f"skipped      {'(recent first)' if info.skipped else 'none'}")
    for s in info.skipped:
        click.echo(
            f"  {s.count} occurrence(s) {render.local(s.first)} .. "
            f"{render.local(s.last)}: {s.reason}"
        )
    click.echo(f"dead letters {'(recent first)' if info.dead_letters else 'none'}")
    for d in info.dead_letters:
        click.echo(
            f"  {render.local(d.at)}  scheduled {render.local(d.scheduled)}  "
            f"attempt {d.attempt}: {d.detail}"
        )
    click.echo(f"events       {f'(last {len(recent)})' if recent else 'none'}")
    for entry in recent:
        click.echo("  " + render.event_line(entry))


def _lease(until: float | None, now: float) -> str:
    """A running invocation's lease, as ``show`` and ``top`` print it."""
    if until is None:
        return "  no lease"
    if until >= now:
        return f"  lease {render.span(until - now)} left"
    return (
        f"  lease expired {render.span(now - until)} ago (its replica stopped or stalled: "
        "the next claim of any replica runs it again)"
    )


def _durations(runs: list[queries.Run]) -> str:
    """The recent runs' durations, newest first: ``1.234s succeeded, 0.5s failed, ...``."""
    return ", ".join(f"{r['duration']:.3g}s {r['outcome']}" for r in runs) + " (newest first)"


@main.command()
@with_url
@namespace_option
@json_option
def stats(redis_url: str | None, namespace: str, as_json: bool) -> None:
    """Show queue depths, lag, running jobs, counters, replicas.

    Per lane: pending invocations and how many are due now (by Redis TIME); dispatch lag
    percentiles of recent claims (from the event stream); invocations running; live
    replicas; the event counters; data-loss alarms."""

    with open_namespace("stats", redis_url, namespace) as store:
        st = queries.stats(store)
        url = store.url
        with_work = [lane for lane, n in st["queue_depths"].items() if n]
        unserved = console_history.unserved_lanes(
            store, with_work, [r["id"] for r in st["replicas"]]
        )
        elsewhere = "" if st["queue_depths"] else namespaces.others(store, namespace)
    if as_json:
        click.echo(json.dumps({**st, "unserved_lanes": unserved}, indent=2))
        return
    now = st["now"]
    click.echo(f"namespace   {namespace} at {url}")
    click.echo(f"redis time  {render.local(now)}")
    lanes = [
        [lane, str(n), str(st["due_now"].get(lane, 0))] for lane, n in st["queue_depths"].items()
    ]
    lines = render.table(["LANE", "QUEUED", "DUE NOW"], lanes, right=frozenset({1, 2}))
    empty = (
        f"lanes       none (nothing was ever enqueued{elsewhere})"
        if not st["data_loss_alarms"]
        else "lanes       none found (Redis lost data: see the data-loss alarms below)"
    )
    click.echo("\n".join(lines) if lanes else empty)
    for lane in unserved:
        click.echo(
            f"warning     lane {lane!r} has {st['queue_depths'][lane]} queued and no live replica "
            f"serves it: start one with --lane {lane}=N"
        )
    for task, n in st["waiting"].items():
        click.echo(
            f"waiting     {n} job(s): no live replica serves task {task!r}: start one that "
            "imports it (--import)"
        )
    click.echo(f"running     {st['running']}")
    lag = st["lag_ms"]
    click.echo(
        "lag         "
        + (
            "no recent claims"
            if not lag.get("samples")
            else f"p50 {lag['p50']:.0f} ms, p90 {lag['p90']:.0f} ms, p99 {lag['p99']:.0f} ms, "
            f"max {lag['max']:.0f} ms over the last {lag['samples']:.0f} claims"
        )
    )
    alive = ", ".join(
        r["id"]
        if r["last_seen"] is None
        else f"{r['id']} (last claim {render.span(r['last_seen'])} ago)"
        for r in st["replicas"]
        if r["alive"]
    )
    click.echo(f"replicas    {st['replicas_alive']} alive{': ' + alive if alive else ''}")
    for r in st["replicas"]:
        if not r["alive"]:
            click.echo(
                f"  {r['id']} last seen {render.span(r['last_seen'] or 0.0)} ago, not alive "
                "(no claim since: stopped, killed or stalled)"
            )
    for owner, tasks in st["serves"].items():
        served = "every task" if tasks is None else ", ".join(tasks) or "no task"
        click.echo(f"  {owner} serves {render.clip(served, 200)}")
    click.echo(f"data loss   {st['data_loss_alarms']} alarm(s)")
    click.echo(f"counters    {'none' if not st['counters'] else ''}".rstrip())
    counts = [[kind, str(n)] for kind, n in st["counters"].items()]
    for line in render.table(["", ""], counts, right=frozenset({1}))[1:]:
        click.echo("  " + line)


@main.command()
@with_url
@namespace_option
@click.option(
    "--count",
    "-c",
    default=20,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the most recent events to print.",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Then wait for new events (XREAD BLOCK, no polling) until Ctrl-C.",
)
@click.option("--job", "job_id", default=None, metavar="ID", help="Only the events of job ID.")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(EVENT_KINDS),
    metavar="KIND",
    help="Only events of this kind (repeatable): claimed, succeeded, failed, retried, "
    "dead_lettered, skipped, quarantined, lease_lost, ... (a kind not listed is refused)",
)
@json_option
def events(
    redis_url: str | None,
    namespace: str,
    count: int,
    follow: bool,
    job_id: str | None,
    kinds: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print recent events, oldest first.

    With --follow, then wait for new ones (XREAD BLOCK) until Ctrl-C; with --json, one
    JSON object per line when following."""

    job = None if job_id is None else job_id_of(job_id)

    def emit(entry: Entry) -> None:
        click.echo(
            json.dumps(render.event_json(entry.event, entry.id))
            if as_json
            else render.event_line(entry)
        )

    with open_namespace("events", redis_url, namespace) as store:
        top = queries.last_event_id(store) if follow else "+"
        wanted = frozenset(kinds) or None
        recent = queries.recent_events(store, count, job, until=top, kinds=wanted)
        if not recent and not follow and count:  # say so: a mistyped -n printed nothing
            of = f" of job {job!r}" if job else ""
            kind = f" of kind {', '.join(sorted(wanted))}" if wanted else ""
            note = namespaces.hint(store, namespace)
            click.echo(f"no events{of}{kind} in namespace {namespace!r}{note}", err=True)
        if as_json and not follow:
            data = [render.event_json(e.event, e.id) for e in recent]
            click.echo(json.dumps(data, indent=2))
            return
        if follow:
            click.echo(
                f"following events of namespace {namespace!r} at {store.url} (Ctrl-C to stop)",
                err=True,
            )
        try:
            for entry in recent:
                emit(entry)
            for entry in (
                queries.follow(store, after=top, job_id=job, kinds=wanted) if follow else ()
            ):
                emit(entry)
        except KeyboardInterrupt:  # the way out of --follow: exit 0
            pass


@main.command()
@with_url
@namespace_option
@click.option(
    "--interval",
    type=FiniteRange(0.1, 3600),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after N refreshes (default: until Ctrl-C).",
)
def top(redis_url: str | None, namespace: str, interval: float, iterations: int | None) -> None:
    """A live view: replicas, queue depth and lag, and the invocations running now.

    Live (no --iterations), a Redis that stops answering is shown on the screen and asked
    again each interval until Ctrl-C; with --iterations, it ends the command (exit 3)."""
    import time

    import redis

    lost = (ConnectionError, TimeoutError, redis.ConnectionError, redis.TimeoutError)
    with open_namespace("top", redis_url, namespace) as store:
        n, down_since = 0, None
        try:
            while iterations is None or n < iterations:
                try:
                    screen, down_since = _top_screen(store, namespace), None
                except lost as exc:  # a stall or a restart: a live view waits it out
                    if iterations is not None:
                        raise
                    down_since = down_since or time.time()
                    screen = (
                        f"duetime top — namespace {namespace} at {store.url}\n\nRedis does not "
                        f"answer since {render.local(down_since)}: {exc}\nasking again every "
                        f"{interval:g}s (Ctrl-C to stop)"
                    )
                if iterations is None:
                    click.clear()
                click.echo(screen)
                n += 1
                if iterations is None or n < iterations:
                    time.sleep(interval)
        except KeyboardInterrupt:
            pass


def _top_screen(store: AnyStore, namespace: str) -> str:

    st = queries.stats(store)
    now = st["now"]
    lag = st["lag_ms"]
    out = [
        f"duetime top — namespace {namespace} at {store.url} — {render.local(now)}",
        f"replicas {st['replicas_alive']}   running {st['running']}   queued "
        f"{sum(st['queue_depths'].values())}   due now {sum(st['due_now'].values())}   "
        + (
            "lag: no recent claims"
            if not lag.get("samples")
            else f"lag p50/p99/max {lag['p50']:.0f}/{lag['p99']:.0f}/{lag['max']:.0f} ms"
        ),
        "",
    ]
    rows = [
        [
            r.job_id,
            render.local(r.scheduled),
            str(r.attempt),
            str(r.fence),
            r.owner,
            render.span(max(0.0, now - r.scheduled)),
            _lease(r.lease_until, now).split(" (")[0].strip().removeprefix("lease "),
        ]
        for r in queries.running(store)
    ]
    out += (
        render.table(
            ["RUNNING JOB", "SCHEDULED", "ATTEMPT", "FENCE", "REPLICA", "FOR", "LEASE"],
            rows,
            right=frozenset({2, 3, 5}),
        )
        if rows
        else ["nothing running"]
    )
    return "\n".join(out)
