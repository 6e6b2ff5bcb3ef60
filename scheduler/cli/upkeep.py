"""Commands for a namespace's upkeep: ``doctor`` (the reconciler, on demand) and
``quarantine`` (what was moved aside because it did not parse: ls, show, restore, purge).

Exit codes as for every command (app.py); ``doctor`` exits 1 when it found something it
did not repair (a dry run, or data only reported), jobs lost (the scripts' count of live
jobs above the live jobs found), or a server that evicts keys; 0 when the namespace is
healthy or was repaired."""

from __future__ import annotations

import json
from typing import Any

import click

from scheduler.cli import render
from scheduler.cli.app import (
    EXIT_REFUSED,
    fail,
    job_argument,
    json_option,
    main,
    namespace_option,
    open_namespace,
    with_url,
)
from scheduler.model import Quarantined, Reconciled
from scheduler.stores.redis.integrity import upkeep
from scheduler.stores.redis.integrity.server_checks import eviction_state
from scheduler.stores.redis.reading import queries


@main.command()
@with_url
@namespace_option
@click.option("--dry-run", is_flag=True, help="Report only; write nothing.")
@json_option
def doctor(redis_url: str | None, namespace: str, dry_run: bool, as_json: bool) -> None:
    """Check every job of the namespace once and repair what a crash or a past bug left
    behind (replicas do the same in the background, a few hundred keys per period).

    Repairs: a live job with no due entry and nothing running is queued again (a one-off
    at-most-once job whose run was issued is recorded as abandoned instead); a running
    count no running invocation backs is set right; a lease no running invocation backs
    is dropped.

    Lost jobs: the live jobs found are compared with the count the scripts keep; jobs
    counted but gone were lost by Redis (eviction, keys deleted by hand). A namespace
    without a count (older than it) gets one, started at the jobs found, when it is
    healthy, quiet and on a server that has not evicted keys.

    Exit 1 if something was found and not repaired, jobs were lost, the server evicts, or
    it has evicted keys and the namespace has no count to tell what was lost."""
    with open_namespace("doctor", redis_url, namespace) as store:
        eviction = eviction_state(store.redis)
        evicts = eviction is not None and eviction[0] != "noeviction"
        evicted = eviction is None or eviction[1] > 0  # keys evicted, or cannot tell
        # a missing count is started only on a server that never evicted (since it started)
        done = store.reconcile(dry_run=dry_run, start_count=not evicts and not evicted)
        aside = len(store.quarantined())
    unrepaired = [f for f in done.findings if f.action in upkeep.UNREPAIRED]
    if as_json:
        data = {
            "scanned": done.scanned,
            "dry_run": dry_run,
            "findings": [
                {"job_id": f.job_id, "problem": f.problem, "action": f.action}
                for f in done.findings
            ],
            "leases_dropped": done.leases_dropped,
            "quarantined": aside,
            "live": {
                "counted": done.live_counted,
                "found": done.live_found,
                "lost": done.lost,
                "changes_during_scan": done.churn,
                "shards_uncounted": done.uncounted,
                "count_started": bool(done.started),
            },
            "eviction": None
            if eviction is None
            else {"maxmemory_policy": eviction[0], "evicted_keys": eviction[1]},
        }
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"checked {done.scanned} job(s) in namespace {namespace!r}")
        rows = [[f.job_id, f.problem, f.action] for f in done.findings]
        if rows:
            click.echo("\n".join(render.table(["JOB", "FOUND", "DONE"], rows)))
        else:
            click.echo("no job needs a repair")
        verb = "would drop" if dry_run else "dropped"
        if done.leases_dropped:
            click.echo(f"{verb} {done.leases_dropped} lease(s) no running invocation backs")
        if aside:
            click.echo(f"{aside} entr(ies) in the quarantine: see `duetime quarantine ls`")
        for line in live_lines(done) + eviction_lines(eviction):
            click.echo(line)
    unknown = done.uncounted and evicted  # an evicting past and no count to tell the loss
    if unrepaired or (dry_run and done.leases_dropped) or done.lost or evicts or unknown:
        raise SystemExit(EXIT_REFUSED)


def live_lines(done: Reconciled) -> list[str]:
    """What doctor says about the live-job count (upkeep.py: the count the scripts keep)."""
    found = done.live_found
    if done.live_counted is None and done.lost is None:
        return [
            f"live jobs: {found} found; lost jobs: unknown, this namespace has no count of "
            "its live jobs (created before duetime kept one, or its stats hash was lost, "
            "e.g. evicted); doctor starts one when the namespace is healthy and quiet on a "
            "server that has never evicted a key (evicted_keys 0: since its start, or "
            "CONFIG RESETSTAT)"
        ]
    lines = []
    if done.started:
        lines.append(
            f"live jobs: {found} found; the count of live jobs starts now "
            f"({done.started} shard(s)): jobs lost before cannot be counted"
        )
    elif done.live_counted is not None:
        lines.append(f"live jobs: {found} found, {done.live_counted} counted by the scripts")
    else:
        lines.append(f"live jobs: {found} found; {done.uncounted} shard(s) have no count")
    if done.lost:
        lines.append(
            f"LOST: {done.lost} job(s) the scripts counted as live are gone from Redis "
            "(evicted, or their keys deleted outside duetime): enqueue them again"
        )
    if done.churn:
        lines.append(
            f"({done.churn} state change(s) during the check: the lost figure is a lower "
            "bound; run doctor on a quiet namespace for an exact one)"
        )
    return lines


def eviction_lines(eviction: tuple[str, int] | None) -> list[str]:
    """What doctor says about the server's eviction (INFO memory and stats)."""
    if eviction is None:
        return ["eviction: unknown (INFO refused: grant this user +info)"]
    policy, evicted = eviction
    if policy != "noeviction":
        return [
            f"EVICTION: Redis has maxmemory-policy {policy!r} ({evicted} key(s) evicted "
            "since it started): it deletes jobs and leases under memory pressure; set "
            "'maxmemory-policy noeviction'"
        ]
    if evicted:
        return [
            f"eviction: Redis evicted {evicted} key(s) since it started (now noeviction): "
            "jobs lost then are counted above if the namespace had a count"
        ]
    return []


@main.group()
def quarantine() -> None:
    """What was moved aside because it did not parse (job data planted or edited by
    hand): list it, show it, put it back after a fix, or purge it."""


@quarantine.command("ls")
@with_url
@namespace_option
@json_option
def quarantine_ls(redis_url: str | None, namespace: str, as_json: bool) -> None:
    """List the quarantine, oldest first."""
    with open_namespace("quarantine ls", redis_url, namespace) as store:
        entries = store.quarantined()
    if as_json:
        click.echo(json.dumps([quarantined_json(q) for q in entries], indent=2))
        return
    if not entries:
        click.echo(f"the quarantine of namespace {namespace!r} is empty")
        return
    rows = [
        [
            q.entry_id,
            q.job_id or "-",
            q.found_by or "-",
            render.local(q.at),
            render.clip(q.reason, 60),
        ]
        for q in entries
    ]
    click.echo("\n".join(render.table(["ENTRY", "JOB", "FOUND BY", "WHEN", "REASON"], rows)))


@quarantine.command("show")
@with_url
@namespace_option
@job_argument
@json_option
def quarantine_show(redis_url: str | None, namespace: str, job_id: str, as_json: bool) -> None:
    """Show entry ID: why it was moved aside, and the raw data kept with it."""
    with open_namespace("quarantine show", redis_url, namespace) as store:
        found = [q for q in store.quarantined() if q.entry_id == job_id]
        if not found:
            fail(f"no entry {job_id!r} in the quarantine of {namespace!r}", EXIT_REFUSED)
        kind, data = upkeep.raw_data(queries.of_job(store, job_id), job_id)
    q = found[0]
    if as_json:
        click.echo(json.dumps({**quarantined_json(q), "data_type": kind, "data": data}, indent=2))
        return
    for label, value in (
        ("entry", q.entry_id),
        ("job", q.job_id or "-"),
        ("reason", q.reason),
        ("found by", q.found_by or "-"),
        ("when", render.local(q.at)),
        ("due entry", q.member or "-"),
        ("lane", q.lane or "-"),
        ("was due", render.local(q.due)),
        ("key type", q.key_type or "-"),
        ("data", f"a {kind}" if kind != "none" else "none kept"),
    ):
        click.echo(f"{label:<11}{value}")
    if isinstance(data, dict):
        for field, value in sorted(data.items()):
            click.echo(f"  {field:<12}{render.clip(str(value), 100)}")
    elif data is not None:
        click.echo("  " + render.clip(str(data), 200))


@quarantine.command("restore")
@with_url
@namespace_option
@job_argument
def quarantine_restore(redis_url: str | None, namespace: str, job_id: str) -> None:
    """Put the job of entry ID back, after fixing its data (`redis-cli` on the key
    `quarantine show` names). Exit 1 if there is no such entry, a job with that id exists
    again, or its data still does not parse (it stays in the quarantine)."""
    with open_namespace("quarantine restore", redis_url, namespace) as store:
        outcome = store.restore(job_id)
    why = {
        "missing": f"no entry {job_id!r} in the quarantine of {namespace!r}",
        "exists": f"a job {job_id!r} exists again: delete it or purge the entry",
        "no-job": f"entry {job_id!r} holds no job (a due entry that did not parse): purge it",
    }
    if outcome.startswith("still-bad "):
        fail(
            f"job {job_id!r} still does not parse: {outcome.removeprefix('still-bad ')}; it "
            "stays in the quarantine: fix its data (quarantine show names the key) and "
            "restore it again",
            EXIT_REFUSED,
        )
    if outcome != "restored":
        fail(why.get(outcome, outcome), EXIT_REFUSED)
    click.echo(f"restored job {job_id!r}")


@quarantine.command("purge")
@with_url
@namespace_option
@click.argument("job_id", metavar="ID", required=False)
@click.option("--all", "every", is_flag=True, help="Purge every entry.")
@click.option("--yes", is_flag=True, help="Do not ask before purging every entry.")
def quarantine_purge(
    redis_url: str | None, namespace: str, job_id: str | None, every: bool, yes: bool
) -> None:
    """Drop entry ID (or --all) and the raw data kept with it, for good."""
    if every == (job_id is not None):
        raise click.UsageError("give one entry ID, or --all")
    if every and not yes:
        click.confirm(f"purge the whole quarantine of namespace {namespace!r}?", abort=True)
    with open_namespace("quarantine purge", redis_url, namespace) as store:
        dropped = store.purge_quarantined(upkeep.ALL if every else str(job_id))
    if not dropped:
        fail(
            f"nothing to purge: the quarantine of {namespace!r} is empty"
            if every
            else f"no entry {job_id!r} in the quarantine of {namespace!r}",
            EXIT_REFUSED,
        )
    click.echo(f"purged {dropped} entr{'y' if dropped == 1 else 'ies'}")


def quarantined_json(q: Quarantined) -> dict[str, Any]:
    return {
        "entry_id": q.entry_id,
        "job_id": q.job_id,
        "reason": q.reason,
        "at": q.at,
        "at_iso": queries.iso(q.at),
        "found_by": q.found_by,
        "member": q.member,
        "lane": q.lane,
        "due": q.due,
        "due_iso": queries.iso(q.due),
        "key_type": q.key_type,
        "legacy": q.legacy,
    }
