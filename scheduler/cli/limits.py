"""``duetime limit``: declare, change, list and remove the limits of a namespace's keys
(docs/flow-control.md), and its key rules (``duetime limit rule``: the key a job added
without one gets from its task or its lane). A limit's change holds from the fleet's next
claim; a rule's, for the jobs added after it."""

from __future__ import annotations

import json

import click

from scheduler import flow, keyrules
from scheduler.cli import render, when
from scheduler.cli.app import (
    EXIT_REFUSED,
    bad_input,
    json_option,
    main,
    namespace_option,
    open_namespace,
    with_url,
)
from scheduler.client_flow import check_known_task
from scheduler.limit_usage import TOP_KEYS, ScopeUsage


@main.group()
def limit() -> None:
    """Limits per key, fleet-wide: N starts per period, K running at once; key rules."""


@limit.command("set")
@with_url
@namespace_option
@click.argument("scope")
@click.option("--rate", type=int, metavar="N", help="At most N starts in any window of --per.")
@click.option("--per", metavar=when.DURATION, help="The rate's window (1ms to 1d), e.g. 60s.")
@click.option("--concurrency", type=int, metavar="K", help="At most K running at once.")
def limit_set(
    redis_url: str | None,
    namespace: str,
    scope: str,
    rate: int | None,
    per: str | None,
    concurrency: int | None,
) -> None:
    """Limit SCOPE: a key (customer:42), a pattern (customer:*: each key on its own) or *."""
    seconds = None if per is None else when.duration("--per", per)
    try:
        scope, declared = flow.declared(scope, flow.limit(rate, seconds, concurrency))
    except (ValueError, TypeError) as exc:
        bad_input(exc)
    assert declared is not None
    with open_namespace("limit set", redis_url, namespace) as store:
        changed = _set(store, scope, declared)
    click.echo(f"{scope}: {declared.describe()}" + ("" if changed else " (unchanged)"))


@limit.command("rm")
@with_url
@namespace_option
@click.argument("scope")
def limit_rm(redis_url: str | None, namespace: str, scope: str) -> None:
    """Remove the limit of SCOPE."""
    try:
        scope = flow.scope(scope)
    except (ValueError, TypeError) as exc:
        bad_input(exc)
    with open_namespace("limit rm", redis_url, namespace) as store:
        changed = _set(store, scope, None)
    _removed(scope, changed, "limit")


@limit.command("ls")
@with_url
@namespace_option
@click.option("--key", "keys", multiple=True, help="Also show where KEY stands (repeatable).")
@click.option(
    "--top",
    type=click.IntRange(0, 1000),
    default=TOP_KEYS,
    show_default=True,
    help="Keys listed per pattern scope (those with the most due jobs waiting).",
)
@json_option
def limit_ls(
    redis_url: str | None, namespace: str, keys: tuple[str, ...], top: int, as_json: bool
) -> None:
    """List the declared limits and what waits on each: per scope, over the keys it
    governs that have due or running work, how many run, started in the rate's window,
    wait (due, not yet claimed), are held (their key's limit is full) and the oldest wait;
    for a pattern, its top keys. With --key, where each KEY stands."""
    with open_namespace("limit ls", redis_url, namespace) as store:
        scopes = store.limit_usage(top)
        try:
            states = [store.parts[0].flow_of(k) for k in keys]
        except (ValueError, TypeError) as exc:
            bad_input(exc)
    if as_json:
        out = {
            "limits": {u.scope: u.limit._asdict() for u in scopes},
            "scopes": [render.scope_usage_json(u) for u in scopes],
            "keys": [render.flow_state_json(s) for s in states],
        }
        click.echo(json.dumps(out, indent=2))
        return
    if not scopes:
        click.echo(
            f"no limits in namespace {namespace!r}: declare one with duetime limit set SCOPE "
            "--rate N --per PERIOD or --concurrency K"
        )
    else:
        click.echo("\n".join(_table(scopes)))
    for u in scopes:
        if u.top and u.scope.endswith("*"):
            click.echo(f"\n{u.scope}: its keys with the most due jobs waiting")
            click.echo("\n".join("  " + line for line in _keys_table(u)))
    for s in states:
        under = "no limit" if s.limit is None else f"{s.scope}: {s.limit.describe()}"
        full = "" if s.full is None else f"; full: {render.full_text(s.full, s.next_start_in)}"
        click.echo(
            f"{s.key}: {under}; running {s.running}, starts in its window {s.recent_starts}{full}"
        )


def _table(scopes: list[ScopeUsage]) -> list[str]:
    head = ["SCOPE", "LIMIT", "KEYS", "RUNNING", "IN WINDOW", "WAITING", "HELD", "OLDEST WAIT"]
    rows = [
        [
            u.scope,
            u.limit.describe(),
            str(u.keys),
            str(u.running),
            str(u.window_starts),
            str(u.waiting),
            str(u.held),
            render.waited(u.oldest_wait),
        ]
        for u in scopes
    ]
    return render.table(head, rows, right=frozenset(range(2, 7)))


def _keys_table(u: ScopeUsage) -> list[str]:
    head = ["KEY", "RUNNING", "IN WINDOW", "WAITING", "OLDEST WAIT", "FULL"]
    rows = [
        [
            k.key,
            str(k.running),
            str(k.window_starts),
            str(k.waiting),
            render.waited(k.oldest_wait),
            render.full_text(k.full, k.next_start_in),
        ]
        for k in u.top
    ]
    return render.table(head, rows, right=frozenset(range(1, 4)))


def _set(store: object, scope: str, lim: flow.Limit | None) -> bool:
    parts = getattr(store, "parts", [store])
    flow.refuse_sharded(len(parts))
    return bool(parts[0].set_limit(scope, lim))


# ---- key rules ------------------------------------------------------------------------------

task_option = click.option("--task", metavar="TASK", help="The rule of this task's jobs.")
lane_option = click.option("--lane", metavar="LANE", help="The rule of this lane's jobs.")


@limit.group()
def rule() -> None:
    """Key rules: a job enqueued without --limit-key gets its task's rule's key, else its
    lane's (TEMPLATE: text with {kwarg} fields, e.g. 'customer:{customer_id}')."""


@rule.command("set")
@with_url
@namespace_option
@task_option
@lane_option
@click.option(
    "--new-task", is_flag=True, help="--task names a task no replica has served yet (not a typo)."
)
@click.argument("template")
def rule_set(
    redis_url: str | None,
    namespace: str,
    task: str | None,
    lane: str | None,
    new_task: bool,
    template: str,
) -> None:
    """Give jobs of --task or --lane the limit key TEMPLATE makes of their kwargs."""
    name = _rule_name(template, task, lane)
    with open_namespace("limit rule set", redis_url, namespace) as store:
        if task is not None and not new_task:
            try:
                check_known_task(store, task)
            except ValueError as exc:
                bad_input(exc)
        changed = _rule(store, template, task, lane)
    click.echo(f"{name}: {template}" + ("" if changed else " (unchanged)"))


@rule.command("rm")
@with_url
@namespace_option
@task_option
@lane_option
def rule_rm(redis_url: str | None, namespace: str, task: str | None, lane: str | None) -> None:
    """Remove the key rule of --task or --lane (jobs stored keep their key)."""
    name = _rule_name(None, task, lane)
    with open_namespace("limit rule rm", redis_url, namespace) as store:
        changed = _rule(store, None, task, lane)
    _removed(name, changed, "rule")


@rule.command("ls")
@with_url
@namespace_option
@json_option
def rule_ls(redis_url: str | None, namespace: str, as_json: bool) -> None:
    """List the key rules: each task's and lane's template."""
    with open_namespace("limit rule ls", redis_url, namespace) as store:
        rules = store.parts[0].key_rules()
    if as_json:
        click.echo(json.dumps({"rules": rules}, indent=2))
    elif not rules:
        click.echo(f"no key rules in namespace {namespace!r}")
    else:
        click.echo("\n".join(render.table(["RULE", "TEMPLATE"], sorted(map(list, rules.items())))))


def _removed(name: str, changed: bool, what: str) -> None:
    """Say what ``rm`` did; removing what is not there is no effect (exit 1, as
    everywhere)."""
    if not changed:
        click.echo(f"nothing to remove: {name} has no {what}", err=True)
        raise SystemExit(EXIT_REFUSED)
    click.echo(f"{name}: removed")


def _rule_name(template: str | None, task: str | None, lane: str | None) -> str:
    try:
        return keyrules.declared(template, task, lane)[0]
    except (ValueError, TypeError) as exc:
        bad_input(exc)


def _rule(store: object, template: str | None, task: str | None, lane: str | None) -> bool:
    parts = getattr(store, "parts", [store])
    flow.refuse_sharded(len(parts), "key rules")
    return bool(parts[0].set_key_rule(template, task=task, lane=lane))
