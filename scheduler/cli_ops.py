"""The ``duetime`` commands that inspect and steer a shared namespace: ``ls``, ``show``,
``stats``, ``events``, ``cancel``, ``pause``, ``resume`` (exit codes: see scheduler.cli).
They are registered on the ``duetime`` group by importing this module."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import click

from scheduler.cli import EXIT_REFUSED, EXIT_UNREACHABLE, main, namespace_option

if TYPE_CHECKING:
    from scheduler.stores.redis import RedisStore
    from scheduler.stores.redis.queries import Entry
    from scheduler.stores.redis.sharded import ShardedStore

    AnyStore = RedisStore | ShardedStore

# ---- inspecting and steering a shared namespace ---------------------------------------------

url_option = click.option(
    "--redis",
    "redis_url",
    envvar="DUETIME_REDIS_URL",
    default=None,
    metavar="URL",
    help="Redis URL of the namespace (redis://, rediss://; user:password@ for AUTH/ACL; "
    "redis+sentinel://host1:26379,host2:26379/SERVICE[/DB]). "
    "Required; default: $DUETIME_REDIS_URL.",
)
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the data as JSON (times as epoch seconds and ISO, UTC).",
)
job_argument = click.argument("job_id", metavar="ID")


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


@contextmanager
def _store(command: str, redis_url: str | None, namespace: str) -> Iterator[AnyStore]:
    """A RedisStore for one command (a ShardedStore if the URL says ``?shards=N`` or
    $DUETIME_SHARDS is set): no URL is a usage error (2); a
    Redis that cannot be reached, or that answers with an error, ends the command with a
    message (3)."""
    if not redis_url:
        raise click.UsageError(f"{command} needs --redis URL (or DUETIME_REDIS_URL)")
    import redis

    from scheduler.stores.redis import StoreUnavailableError
    from scheduler.stores.redis import queries as inspect
    from scheduler.stores.redis.sharded import open_store
    from scheduler.stores.redis.shards import ShardCountError, check_count

    shards = os.environ.get("DUETIME_SHARDS") or None  # else the URL's ?shards=N, else 1
    try:
        store = open_store(redis_url, namespace, shards=None if shards is None else int(shards))
    except ValueError as exc:  # a malformed URL, namespace or shard count
        raise click.UsageError(str(exc)) from None
    try:
        check_count(store.redis, inspect.parts(store)[0].keys, store.url, record=False)
        yield store
    except StoreUnavailableError as exc:
        _fail(str(exc), EXIT_UNREACHABLE)
    except ShardCountError as exc:
        _fail(str(exc), EXIT_REFUSED)
    except (redis.ConnectionError, redis.TimeoutError) as exc:  # AuthenticationError too
        _fail(f"cannot reach Redis at {store.url}: {exc}", EXIT_UNREACHABLE)
    except redis.RedisError as exc:
        _fail(f"Redis at {store.url} answered with an error: {exc}", EXIT_UNREACHABLE)
    finally:
        store.close()


def _job_id(job_id: str) -> str:
    from scheduler import validation

    try:
        return validation.job_id(job_id)
    except (ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None


@main.command("ls")
@url_option
@namespace_option
@json_option
def ls(redis_url: str | None, namespace: str, as_json: bool) -> None:
    """List live jobs, soonest next run first.

    Live: scheduled, running or paused. NEXT RUN: local time, and relative to Redis TIME."""
    from scheduler.stores.redis import queries as inspect

    with _store("ls", redis_url, namespace) as store:
        jobs = sorted(store.jobs(), key=lambda i: (i.next_run is None, i.next_run or 0.0, i.job_id))
        now = inspect.redis_now(store)
    if as_json:
        click.echo(json.dumps([inspect.job_json(i) for i in jobs], indent=2))
        return
    if not jobs:
        click.echo(f"no live jobs in namespace {namespace!r}")
        return
    rows = [
        [
            i.job_id,
            i.schedule,
            i.lane,
            i.state,
            inspect.when(i.next_run, now),
            str(i.runs),
            str(i.failures),
            inspect.clip(i.last_error, 40),
        ]
        for i in jobs
    ]
    head = ["ID", "SCHEDULE", "LANE", "STATE", "NEXT RUN", "RUNS", "FAILURES", "LAST ERROR"]
    for line in inspect.table(head, rows, right=frozenset({5, 6})):
        click.echo(line)


@main.command()
@url_option
@namespace_option
@job_argument
@json_option
def show(redis_url: str | None, namespace: str, job_id: str, as_json: bool) -> None:
    """Show one job in full.

    Every field, running invocations, recent skips (with reasons) and dead letters, and
    the last 20 events. Exit 1 if there is no such job (finished ones are kept a day)."""
    from scheduler.stores.redis import queries as inspect

    job_id = _job_id(job_id)
    with _store("show", redis_url, namespace) as store:
        info = store.get(job_id)
        if info is None:
            _fail(
                f"no job with id {job_id!r} in namespace {namespace!r} (finished jobs are "
                "kept for a day)",
                EXIT_REFUSED,
            )
        recent = inspect.recent_events(store, 20, job_id)
        now = inspect.redis_now(store)
    if as_json:
        events = [inspect.event_json(e.event, e.id) for e in recent]
        click.echo(json.dumps({**inspect.job_json(info), "events": events}, indent=2))
        return
    result = "-" if info.last_result is None else json.dumps(info.last_result)
    for label, value in (
        ("job", info.job_id),
        ("schedule", info.schedule),
        ("lane", info.lane),
        ("state", info.state),
        ("next run", inspect.when(info.next_run, now)),
        ("runs", info.runs),
        ("failures", info.failures),
        ("attempts", info.attempts),
        ("last result", inspect.clip(result, 200)),
        ("last error", info.last_error or "-"),
    ):
        click.echo(f"{label:<13}{value}")
    click.echo(f"running      {len(info.running) or 'none'}")
    for inv in info.running:
        click.echo(
            f"  scheduled {inspect.local(inv.scheduled)}  attempt {inv.attempt}  fence {inv.fence}"
        )
    click.echo(f"skipped      {'(recent first)' if info.skipped else 'none'}")
    for s in info.skipped:
        click.echo(
            f"  {s.count} occurrence(s) {inspect.local(s.first)} .. "
            f"{inspect.local(s.last)}: {s.reason}"
        )
    click.echo(f"dead letters {'(recent first)' if info.dead_letters else 'none'}")
    for d in info.dead_letters:
        click.echo(
            f"  {inspect.local(d.at)}  scheduled {inspect.local(d.scheduled)}  "
            f"attempt {d.attempt}: {d.detail}"
        )
    click.echo(f"events       {f'(last {len(recent)})' if recent else 'none'}")
    for entry in recent:
        click.echo("  " + inspect.event_line(entry))


def _steer(verb: str, redis_url: str | None, namespace: str, job_id: str) -> None:
    """cancel / pause / resume: say what happened; exit 1 if it had no effect."""
    from scheduler.client import Client
    from scheduler.stores.redis import queries as inspect

    job_id = _job_id(job_id)
    with _store(verb, redis_url, namespace) as store:
        client = Client(store)
        done = {
            "cancel": client.cancel,
            "pause": client.pause,
            "resume": client.resume,
            "trigger": client.trigger,
        }[verb](job_id)
        info = store.get(job_id)
        now = inspect.redis_now(store)
    if done:
        extra = ""
        if info is not None and verb == "resume" and info.next_run is not None:
            extra = f", next run {inspect.when(info.next_run, now)}"
        if info is not None and info.running:
            extra += f"; {len(info.running)} running invocation(s) may finish"
        past = {
            "cancel": "cancelled",
            "pause": "paused",
            "resume": "resumed",
            "trigger": "triggered a run of",
        }[verb]
        click.echo(f"{past} job {job_id!r}{extra}")
        return
    if info is None:
        _fail(f"no job with id {job_id!r} in namespace {namespace!r}", EXIT_REFUSED)
    why = {
        "pause": "already paused" if info.state == "paused" else info.state,
        "resume": f"not paused (it is {info.state})",
    }.get(verb, info.state)
    click.echo(f"nothing to {verb}: job {job_id!r} is {why}", err=True)
    raise SystemExit(EXIT_REFUSED)


@main.command()
@url_option
@namespace_option
@job_argument
def cancel(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Cancel job ID.

    No invocation of it starts any more (a running one may finish). Exit 0 if this
    prevented a start, else 1 (unknown, finished or cancelled job, or a running one-off)."""
    _steer("cancel", redis_url, namespace, job_id)


@main.command()
@url_option
@namespace_option
@job_argument
def trigger(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Run job ID once now, outside its schedule (recorded as "triggered").

    The schedule is unchanged. Exit 1 if the job is unknown, finished or cancelled."""
    _steer("trigger", redis_url, namespace, job_id)


@main.command()
@url_option
@namespace_option
@job_argument
@click.option("--start", type=float, required=True, help="Window start, epoch seconds.")
@click.option("--end", type=float, required=True, help="Window end (excluded), epoch seconds.")
def backfill(redis_url: str | None, namespace: str, job_id: str, start: float, end: float) -> None:
    """Run the occurrences of recurring job ID in [START, END) that never ran.

    Those before the job existed and those it skipped (misfire, overlap) run once each;
    those that ran, or that an earlier backfill queued, do not. Exit 1 if none qualify."""
    from scheduler.client import Client

    job_id = _job_id(job_id)
    with _store("backfill", redis_url, namespace) as store:
        try:
            queued = Client(store).backfill(job_id, start, end)
        except ValueError as exc:
            _fail(str(exc), EXIT_REFUSED)
    if not queued:
        click.echo(
            f"nothing to backfill: no occurrence of {job_id!r} in the window that never ran",
            err=True,
        )
        raise SystemExit(EXIT_REFUSED)
    click.echo(f"queued {queued} run(s) of job {job_id!r}")


@main.command()
@url_option
@namespace_option
@job_argument
def pause(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Pause job ID until resume.

    Exit 1 if the job is unknown, finished, cancelled or already paused."""
    _steer("pause", redis_url, namespace, job_id)


@main.command()
@url_option
@namespace_option
@job_argument
def resume(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Resume paused job ID.

    Occurrences missed while paused follow the job's misfire policy. Exit 1 if the job
    is unknown or not paused."""
    _steer("resume", redis_url, namespace, job_id)


@main.command()
@url_option
@namespace_option
@json_option
def stats(redis_url: str | None, namespace: str, as_json: bool) -> None:
    """Show queue depths, lag, running jobs, counters, replicas.

    Per lane: pending invocations and how many are due now (by Redis TIME); dispatch lag
    percentiles of recent claims (from the event stream); invocations running; live
    replicas; the event counters; data-loss alarms."""
    from scheduler.stores.redis import queries as inspect

    with _store("stats", redis_url, namespace) as store:
        st = inspect.stats(store)
        url = store.url
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    now = st["now"]
    click.echo(f"namespace   {namespace} at {url}")
    click.echo(f"redis time  {inspect.local(now)}")
    lanes = [
        [lane, str(n), str(st["due_now"].get(lane, 0))] for lane, n in st["queue_depths"].items()
    ]
    lines = inspect.table(["LANE", "QUEUED", "DUE NOW"], lanes, right=frozenset({1, 2}))
    click.echo("\n".join(lines) if lanes else "lanes       none (nothing was ever enqueued)")
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
        if r["last_claim"] is None
        else f"{r['id']} (last claim {inspect.span(max(0.0, now - r['last_claim']))} ago)"
        for r in st["replicas"]
    )
    click.echo(f"replicas    {st['replicas_alive']} alive{': ' + alive if alive else ''}")
    click.echo(f"data loss   {st['data_loss_alarms']} alarm(s)")
    click.echo(f"counters    {'none' if not st['counters'] else ''}".rstrip())
    counts = [[kind, str(n)] for kind, n in st["counters"].items()]
    for line in inspect.table(["", ""], counts, right=frozenset({1}))[1:]:
        click.echo("  " + line)


@main.command()
@url_option
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
@json_option
def events(
    redis_url: str | None,
    namespace: str,
    count: int,
    follow: bool,
    job_id: str | None,
    as_json: bool,
) -> None:
    """Print recent events, oldest first.

    With --follow, then wait for new ones (XREAD BLOCK) until Ctrl-C; with --json, one
    JSON object per line when following."""
    from scheduler.stores.redis import queries as inspect

    job = None if job_id is None else _job_id(job_id)

    def emit(entry: Entry) -> None:
        click.echo(
            json.dumps(inspect.event_json(entry.event, entry.id))
            if as_json
            else inspect.event_line(entry)
        )

    with _store("events", redis_url, namespace) as store:
        top = inspect.last_event_id(store) if follow else "+"
        recent = inspect.recent_events(store, count, job, until=top)
        if as_json and not follow:
            data = [inspect.event_json(e.event, e.id) for e in recent]
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
            for entry in inspect.follow(store, after=top, job_id=job) if follow else ():
                emit(entry)
        except KeyboardInterrupt:  # the way out of --follow: exit 0
            pass


@main.command()
@url_option
@namespace_option
@click.option("--interval", default=1.0, show_default=True, help="Seconds between refreshes.")
@click.option(
    "--iterations", type=int, default=None, help="Stop after N refreshes (default: until Ctrl-C)."
)
def top(redis_url: str | None, namespace: str, interval: float, iterations: int | None) -> None:
    """A live view: replicas, queue depth and lag, and the invocations running now."""
    import time

    with _store("top", redis_url, namespace) as store:
        n = 0
        try:
            while iterations is None or n < iterations:
                screen = _top_screen(store, namespace)
                if iterations is None:
                    click.clear()
                click.echo(screen)
                n += 1
                if iterations is None or n < iterations:
                    time.sleep(interval)
        except KeyboardInterrupt:
            pass


def _top_screen(store: AnyStore, namespace: str) -> str:
    from scheduler.stores.redis import queries as inspect

    st = inspect.stats(store)
    now = st["now"]
    lag = st["lag_ms"]
    out = [
        f"duetime top — namespace {namespace} at {store.url} — {inspect.local(now)}",
        f"replicas {st['replicas_alive']}   running {st['running']}   queued "
        f"{sum(st['queue_depths'].values())}   due now {sum(st['due_now'].values())}   "
        + (
            "lag: no recent claims"
            if not lag.get("samples")
            else f"lag p50/p99/max {lag['p50']:.0f}/{lag['p99']:.0f}/{lag['max']:.0f} ms"
        ),
        "",
    ]
    rows = []
    running = {
        t: d
        for part in inspect.parts(store)
        for t, d in part.redis.hgetall(part.keys.running).items()
    }
    for token, data in sorted(running.items()):
        _gen, sched, attempt, _stalls, fence, job = data.split("|", 5)
        owner = token.rsplit(":", 1)[0]
        rows.append(
            [
                job,
                inspect.local(int(sched) / 1000),
                attempt,
                fence,
                owner,
                inspect.span(max(0.0, now - int(sched) / 1000)),
            ]
        )
    out += (
        inspect.table(
            ["RUNNING JOB", "SCHEDULED", "ATTEMPT", "FENCE", "REPLICA", "FOR"],
            rows,
            right=frozenset({2, 3, 5}),
        )
        if rows
        else ["nothing running"]
    )
    return "\n".join(out)
