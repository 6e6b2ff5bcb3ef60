"""Commands that create work in a namespace: ``enqueue`` a job, ``backfill`` missed runs."""

from __future__ import annotations

import json
from typing import Any

import click

from scheduler import validation
from scheduler.cli import when
from scheduler.cli.app import (
    EXIT_REFUSED,
    bad_input,
    check_wait,
    connect,
    fail,
    job_argument,
    job_id_of,
    main,
    namespace_option,
    need_url,
    open_namespace,
    shards_option,
    with_url,
    with_wait_options,
)
from scheduler.model import Ambiguous, Cron, Missing, RetryPolicy
from scheduler.specs import JOB_OPTIONS, SERIES_ONLY, JobOption
from scheduler.stores.redis.reading import fleet, namespaces
from scheduler.validation import MAX_DEPTH


def job_options(fn: Any) -> Any:
    """A flag per job option (``specs.JOB_OPTIONS``), each passed as ``opt_<name>``."""
    for o in reversed(JOB_OPTIONS):
        metavars = {"duration": when.DURATION, "retry": "JSON", "text": "NAME", "int": "N"}
        metavar = metavars.get(o.kind)
        kind: Any = None
        if o.kind == "choice":
            kind = click.Choice(o.choices)
        elif o.kind == "int":
            kind = click.IntRange(*validation.PRIORITY_RANGE)
        fn = click.option(o.cli, f"opt_{o.name}", type=kind, metavar=metavar, help=o.help)(fn)
    return fn


def _read(o: JobOption, text: str) -> Any:
    if o.kind == "duration":
        return when.duration(o.cli, text)
    if o.kind == "int":
        return int(text)
    if o.kind != "retry":
        return text
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{o.cli} is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise click.BadParameter(f"{o.cli} must be a JSON object of RetryPolicy fields")
    try:
        return RetryPolicy(**fields)
    except TypeError:
        raise click.BadParameter(
            f"{o.cli} has unknown field(s) {sorted(set(fields) - _RETRY_FIELDS)}; its fields: "
            f"{', '.join(sorted(_RETRY_FIELDS))}"
        ) from None
    except ValueError as exc:
        raise click.BadParameter(f"{o.cli}: {exc}") from None


_RETRY_FIELDS = set(RetryPolicy.__dataclass_fields__)


def given_options(values: dict[str, Any]) -> dict[str, Any]:
    """The job options given on the command line, read (``opt_<name>`` -> ``name``)."""
    return {
        o.name: _read(o, values[f"opt_{o.name}"])
        for o in JOB_OPTIONS
        if values.get(f"opt_{o.name}") is not None
    }


def _one_off_options(options: dict[str, Any]) -> None:
    """Refuse the options only a recurring job uses (``specs.SERIES_ONLY``) for a one-off,
    by their flags, as ``--tz`` is refused without ``--cron``."""
    flags = [o.cli for o in JOB_OPTIONS if o.name in SERIES_ONLY and o.name in options]
    if flags:
        raise click.UsageError(
            f"{' and '.join(flags)} {'applies' if len(flags) == 1 else 'apply'} to --every "
            "and --cron only: a one-off job runs once, late if it must"
        )


def _waits_note(store: Any, namespace: str, task: str, lane: str) -> str | None:
    """Why a job just stored would wait, if it would: no live replica in ``namespace`` (a
    mistyped -n, say), none that serves ``task``, none that runs ``lane``."""
    from scheduler.stores.redis.reading import console_history

    note = namespaces.unserved_note(store, namespace)
    if note is not None:
        return note
    serving = fleet.serving(store)
    why = serving.why_waiting(task)
    if why:
        return f"note: {why}: the job waits until one that imports it runs"
    if console_history.unserved_lanes(store, [lane], [*serving.by_replica, *serving.unknown]):
        return (
            f"note: no live replica runs lane {lane!r}: the job waits until one that does "
            f"starts (duetime run --lane {lane}=N)"
        )
    return None


def _kwargs(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"--kwargs is not JSON: {exc}") from None
    except ValueError as exc:  # an integer longer than Python converts (4300 digits)
        raise click.BadParameter(f"--kwargs holds a number too long to read: {exc}") from None
    except RecursionError:
        raise click.BadParameter(
            f"--kwargs is nested too deeply (more than {MAX_DEPTH} levels of lists and objects)"
        ) from None


@main.command()
@with_url
@namespace_option
@click.argument("task")
@click.option("--kwargs", "kwargs_json", default="{}", help="Task keyword arguments (JSON).")
@click.option(
    "--in",
    "--delay",  # the name Client.enqueue gives it: what a Python user types first
    "delay",
    default=None,
    metavar=when.DURATION,
    help=f"Run once after DURATION: {when.DURATION_HELP}.",
)
@click.option(
    "--at", "at", default=None, metavar=when.INSTANT, help=f"Run once at TIME: {when.INSTANT_HELP}."
)
@click.option(
    "--allow-past",
    is_flag=True,
    help="Accept an --at more than 24 h in the past (a past --at runs at once; further "
    "back than a day is refused as a likely mistake).",
)
@click.option(
    "--every", default=None, metavar=when.DURATION, help="Run every DURATION (fixed rate)."
)
@click.option(
    "--anchor", default=None, metavar=when.INSTANT, help="An instant of the --every grid (TIME)."
)
@click.option(
    "--cron",
    "cron_expr",
    default=None,
    metavar="EXPR",
    help="Run by the calendar: 5 fields, or 6 with seconds first.",
)
@click.option("--tz", default=None, metavar="ZONE", help="IANA zone of --cron (default UTC).")
@click.option(
    "--ambiguous",
    type=click.Choice(["first", "last", "both"]),
    default=None,
    help="--cron: a local time that occurs twice (clocks go back) runs once at "
    "its first or last instant, or at both.  [default: first]",
)
@click.option(
    "--missing",
    type=click.Choice(["shift", "skip"]),
    default=None,
    help="--cron: a local time that does not exist (clocks go forward) runs at "
    "the end of the gap, or not at all.  [default: shift]",
)
@click.option(
    "--jitter",
    default=None,
    metavar=when.DURATION,
    help="--cron: delay each run by a fixed, job-id-seeded part of DURATION.",
)
@click.option("--id", "job_id", default=None, help="Job id (an upsert if it exists).")
@job_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@with_wait_options
@shards_option
def enqueue(
    redis_url: str | None,
    namespace: str,
    task: str,
    kwargs_json: str,
    delay: str | None,
    at: str | None,
    allow_past: bool,
    every: str | None,
    anchor: str | None,
    cron_expr: str | None,
    tz: str | None,
    ambiguous: str | None,
    missing: str | None,
    jitter: str | None,
    job_id: str | None,
    as_json: bool,
    wait_replicas: int,
    wait_timeout_ms: int,
    shards: int | None,
    **opts: Any,
) -> None:
    """Store a job for TASK (a registered task name) in a running namespace."""
    from scheduler.client import Client
    from scheduler.errors import ShardCountError

    redis_url = need_url("enqueue", redis_url)
    check_wait(wait_replicas, wait_timeout_ms)
    kwargs = _kwargs(kwargs_json)
    if cron_expr is None and (tz or jitter or ambiguous or missing):
        raise click.UsageError("--tz, --jitter, --ambiguous and --missing apply to --cron only")
    times: dict[str, Any] = {
        "delay": when.duration("--in", delay),
        "every": when.duration("--every", every),
    }
    spread = when.duration("--jitter", jitter) or 0.0
    options = given_options(opts)
    if every is None and cron_expr is None:
        _one_off_options(options)
    (times["at"],) = when.instants(("--at", at), allow_past=allow_past)
    (times["anchor"],) = when.instants(("--anchor", anchor), due=False)
    try:
        cron = (
            None
            if cron_expr is None
            else Cron(
                cron_expr,
                tz or "UTC",
                Ambiguous(ambiguous or "first"),
                Missing(missing or "shift"),
                spread,
            )
        )
        store = connect(
            redis_url,
            namespace,
            shards=shards,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
        )
        with Client(store) as client:
            jid = client.enqueue(
                task,
                kwargs=kwargs,
                cron=cron,
                job_id=job_id,
                allow_past=True,
                **times,
                **options,
            )
            note = _waits_note(store, namespace, task, options.get("lane") or "default")
    except ShardCountError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_REFUSED) from None
    except (ValueError, TypeError) as exc:
        bad_input(exc)
    click.echo(json.dumps({"job_id": jid}) if as_json else jid)
    if note:
        click.echo(note, err=True)


@main.command()
@with_url
@namespace_option
@job_argument
@click.option(
    "--start", required=True, metavar=when.INSTANT, help=f"Window start: {when.INSTANT_HELP}."
)
@click.option("--end", required=True, metavar=when.INSTANT, help="Window end (excluded), TIME.")
def backfill(redis_url: str | None, namespace: str, job_id: str, start: str, end: str) -> None:
    """Run the occurrences of recurring job ID in [START, END) that never ran.

    Those before the job existed and those it skipped (misfire, overlap) run once each,
    due now; those that ran, or that an earlier backfill queued, do not, nor those from
    the job's next occurrence on (the series runs them). Exit 1 if none qualify."""
    from scheduler.client import Client
    from scheduler.timeinput import iso_utc

    job_id = job_id_of(job_id)
    a, b = when.instants(("--start", start), ("--end", end), due=False)
    assert a is not None and b is not None
    if b <= a:
        raise click.UsageError(f"--end ({end}) must be after --start ({start})")
    with open_namespace("backfill", redis_url, namespace) as store:
        try:
            queued = Client(store).backfill(job_id, a, b)
        except ValueError as exc:
            fail(str(exc), EXIT_REFUSED)
        info = store.get(job_id)
        pending = store.pending_occurrence(job_id)  # the series' own (next_run: a run queued)
        if not queued and info is None:
            hint = namespaces.hint(store, namespace)
            fail(f"no job with id {job_id!r} in namespace {namespace!r}{hint}", EXIT_REFUSED)
    if not queued:
        click.echo(
            f"nothing to backfill: no occurrence of {job_id!r} in the window that never ran",
            err=True,
        )
        raise SystemExit(EXIT_REFUSED)
    window = f"[{iso_utc(a)}, {iso_utc(b)})"
    line = f"queued {queued} run(s) of job {job_id!r}, due now: its occurrences in {window}"
    line += " that never ran"
    if pending is not None and pending < b:  # the series' own: not queued, run at their times
        line += f"; from its next occurrence ({iso_utc(pending)}) on, they run on schedule"
    click.echo(line)
