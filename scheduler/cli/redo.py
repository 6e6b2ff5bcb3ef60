"""Commands that redo or remove work: ``retry`` (dead-lettered and failed jobs),
``delete`` (one job and all it owns) and ``purge`` (a whole namespace, every shard).

Exit codes, as every command: 0 done, 1 refused or no effect, 2 bad usage, 3 Redis
unreachable or refusing."""

from __future__ import annotations

import json
from typing import Any

import click

from scheduler.cli.app import (
    EXIT_REFUSED,
    EXIT_USAGE,
    fail,
    job_id_of,
    json_option,
    main,
    namespace_option,
    open_namespace,
    with_url,
)
from scheduler.model import RETRY_REFUSALS
from scheduler.stores.redis import redo
from scheduler.stores.redis.reading import fleet, namespaces, queries


def _emit(as_json: bool, data: dict[str, Any], line: str, code: int = 0) -> None:
    """Print ``data`` (--json) or ``line``; exit ``code`` (1: refused, as one line)."""
    if as_json:
        click.echo(json.dumps(data, indent=2))
    elif code:
        click.echo(f"error: {line}", err=True)
    else:
        click.echo(line)
    if code:
        raise SystemExit(code)


@main.command()
@with_url
@namespace_option
@click.argument("job_id", metavar="ID", required=False)
@click.option("--failed", is_flag=True, help="Every job with dead letters (failed ones too).")
@click.option("--task", default=None, help="With --failed: only jobs of this task.")
@click.option("--dry-run", is_flag=True, help="With --failed: list what would be retried.")
@json_option
def retry(
    redis_url: str | None,
    namespace: str,
    job_id: str | None,
    failed: bool,
    task: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Run dead-lettered invocations again: of job ID, or of every job (--failed).

    Each dead-lettered invocation is queued once, due now, at attempt 1; a failed job is
    live again. Recorded as a retried_by_operator event. Exit 1 if nothing was retried
    (unknown job, one running, or one with no dead letter), 2 for bad usage."""
    if (job_id is None) == (not failed):
        fail("give either a job ID or --failed", EXIT_USAGE)
    if job_id is not None and (task or dry_run):
        fail("--task and --dry-run go with --failed", EXIT_USAGE)
    with open_namespace("retry", redis_url, namespace) as store:
        if job_id is not None:
            done = redo.retry(store, job_id_of(job_id))
            data = {"job_id": done.job_id, "queued": done.queued, "refused": done.refused}
            if done.refused:
                why = RETRY_REFUSALS[done.refused]
                _emit(as_json, data, f"cannot retry job {job_id!r}: {why}", EXIT_REFUSED)
            _unserved(store, namespace)
            _emit(as_json, data, f"retried job {job_id!r}: {done.queued} invocation(s) due now")
            return
        if dry_run:
            ids = redo.retryable(store, task)
            data = {"dry_run": True, "jobs": ids}
            _emit(
                as_json, data, f"would retry {len(ids)} job(s)" + "".join(f"\n  {i}" for i in ids)
            )
            return
        results = redo.retry_failed(store, task)
        if any(r.queued for r in results):
            _unserved(store, namespace)
    jobs = [{"job_id": r.job_id, "queued": r.queued, "refused": r.refused} for r in results]
    queued = sum(r.queued for r in results)
    lines = [f"retried {sum(1 for r in results if r.queued)} job(s), {queued} invocation(s)"]
    lines += [f"  {r.job_id}: {r.queued or r.refused}" for r in results]
    _emit(
        as_json, {"dry_run": False, "jobs": jobs}, "\n".join(lines), 0 if queued else EXIT_REFUSED
    )


def _unserved(store: Any, namespace: str) -> None:
    """Say on stderr when no replica is alive to run what was just queued."""
    note = namespaces.unserved_note(store, namespace)
    if note:
        click.echo(note, err=True)


@main.command()
@with_url
@namespace_option
@click.argument("job_id", metavar="ID")
@json_option
def delete(redis_url: str | None, namespace: str, job_id: str, as_json: bool) -> None:
    """Delete job ID and everything it owns.

    Its definition and state, pending invocations, skips, dead letters and backfill record
    go; a running invocation may finish, and its outcome is dropped. Exit 1 if there is no
    such job."""
    job_id = job_id_of(job_id)
    with open_namespace("delete", redis_url, namespace) as store:
        gone = redo.delete(store, job_id)
        hint = "" if gone else namespaces.hint(store, namespace)
    data = {"job_id": job_id, "deleted": gone}
    if not gone:
        line = f"no job with id {job_id!r} in namespace {namespace!r}{hint}"
        _emit(as_json, data, line, EXIT_REFUSED)
    _emit(as_json, data, f"deleted job {job_id!r}")


@main.command()
@with_url
@click.argument("namespace")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Only count the keys that would go.")
@click.option("--force", is_flag=True, help="Purge even while replicas are alive.")
@json_option
def purge(
    redis_url: str | None, namespace: str, yes: bool, dry_run: bool, force: bool, as_json: bool
) -> None:
    """Delete namespace NAMESPACE: every key of every shard.

    Asks for confirmation unless --yes. Refused (exit 1) while replicas are alive unless
    --force (stop them first: a live replica writes again). --dry-run counts the keys."""
    with open_namespace("purge", redis_url, namespace) as store:
        alive = [r["id"] for part in queries.parts(store) for r in fleet.replicas(part)]
        keys = redo.namespace_keys(store)
        data: dict[str, Any] = {"namespace": namespace, "keys": keys, "replicas_alive": alive}
        if dry_run:
            _emit(
                as_json,
                {**data, "deleted": 0, "dry_run": True},
                f"would delete {keys} key(s) of namespace {namespace!r}"
                + ("" if keys else namespaces.others(store, namespace)),  # a typo, most likely
            )
            return
        if not keys:  # a mistyped namespace, most likely: say what is here
            line = f"nothing to purge: namespace {namespace!r} holds no keys"
            line += namespaces.others(store, namespace)
            _emit(as_json, {**data, "deleted": 0, "dry_run": False}, line, EXIT_REFUSED)
        if alive and not force:
            line = (
                f"{len(alive)} replica(s) alive in namespace {namespace!r} "
                f"({', '.join(alive[:5])}): stop them first, or --force"
            )
            _emit(as_json, {**data, "deleted": 0, "dry_run": False}, line, EXIT_REFUSED)
        if not yes and not click.confirm(
            f"delete all {keys} key(s) of namespace {namespace!r}?", err=True
        ):
            _emit(
                as_json, {**data, "deleted": 0, "dry_run": False}, "nothing deleted", EXIT_REFUSED
            )
        gone = redo.purge_namespace(store)
    _emit(
        as_json,
        {**data, "deleted": gone, "dry_run": False},
        f"deleted {gone} key(s) of namespace {namespace!r}",
    )
