"""Check the delivery invariants I1-I7 (docs/reliability.md) over a recorded history.

A history is what a fault run leaves behind: the namespace's event stream (Redis time,
in stream order), the witness's execution log (one entry per start of a task), the job
ids whose enqueue was acknowledged, the recurring jobs and their periods, and the faults
that were injected (with wall-clock times, same host as both Redis servers).

``check(history)`` returns a ``Report``: a readable list of violations (empty = every
invariant holds) and the figures of docs/reliability.md (lost, duplicates by cause, duplicate
commits, recovery times, lateness). Each extra execution is attributed to a fault whose
pid or window explains it; an extra execution nothing explains is a violation (I6).

How attempts move (adapted from the plan to what the scripts do): a lease that expires
(``lease_lost``) or a failure with a retry (``retried``) re-issues the invocation with
attempt + 1; a hand-back of a claimed-but-unstarted invocation (``released``, on
shutdown) re-issues the *same* attempt with a new token. I1 is therefore checked as
"every claim of an invocation follows the end of the previous claim, and attempt 1 is
claimed again only after a release".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

TERMINAL = {"succeeded", "failed", "abandoned"}
ENDS = {"lease_lost", "retried", "released"}
DEATH = {"kill", "crash"}


@dataclass(frozen=True)
class Fault:
    """An injected fault. ``pid``: the replica it hit (None: Redis or the network);
    ``until_ms``: the end of a fault with a duration (stop, outage)."""

    kind: str  # kill crash stop renew_fail outage slow_network data_loss term
    at_ms: float
    until_ms: float | None = None
    pid: int | None = None


@dataclass
class History:
    events: list[dict[str, Any]]
    execs: list[dict[str, Any]]
    expected: set[str]
    lease_ms: int
    recurring: dict[str, int] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    slack_ms: int = 1000  # a renewal sent before a death, processed after it (I5)
    drained: bool = True  # the run ended with nothing left in flight
    stale_commits_rejected: int = 0
    fenced_rejects: int = 0
    event_gaps: list[tuple[str, int]] = field(default_factory=list)  # recorder.py's gaps


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    invocations: int = 0
    executions: int = 0
    lost: int = 0
    duplicates: Counter[str] = field(default_factory=Counter)
    duplicate_commits: int = 0
    dead_lettered: int = 0  # owners lost the lease max_stalls times (poison)
    stale_commits_rejected: int = 0
    fenced_rejects: int = 0
    recovery_ms: list[float] = field(default_factory=list)
    reclaim_ms: list[float] = field(default_factory=list)
    lateness_ms: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        dup = ", ".join(f"{k}: {v}" for k, v in sorted(self.duplicates.items())) or "0"
        text = (
            f"{self.invocations} invocations, {self.executions} executions, lost "
            f"{self.lost}, extra executions ({dup}), duplicate commits "
            f"{self.duplicate_commits}, dead-lettered after stalls "
            f"{self.dead_lettered}, stale commits rejected "
            f"{self.stale_commits_rejected}, fenced rejects {self.fenced_rejects}"
        )
        if self.violations:
            text += "\nVIOLATIONS:\n  " + "\n  ".join(self.violations[:50])
        return text


def owner_pid(owner: str) -> int | None:
    """The pid inside a replica's owner id ``<host>-<pid>-<hex>``."""
    parts = owner.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


@dataclass
class _Claim:
    attempt: int
    pid: int | None
    at: int
    end: str | None = None
    end_at: int | None = None


def check(h: History) -> Report:
    rep = Report(stale_commits_rejected=h.stale_commits_rejected, fenced_rejects=h.fenced_rejects)
    if h.event_gaps:  # first: the violations after it may be the recorder's, not a replica's
        missed = sum(n for _, n in h.event_gaps)
        rep.violations.append(
            f"recorder: {missed} stream entries were trimmed before it read them (after "
            f"{', '.join(last for last, _ in h.event_gaps[:3])}): the checks below lack "
            "their events; the recorder was starved of CPU past the stream's cap"
        )
    lossy = any(f.kind == "data_loss" for f in h.faults)
    claims, terminals = _walk(h.events, rep, lossy)
    invs = set(claims) | set(terminals)
    rep.invocations = len(invs)
    _accounting(h, claims, terminals, rep)
    _recovery(h, claims, rep)
    _executions(h, claims, rep, lossy)
    _recurrence(h, rep)
    return rep


def _walk(
    events: list[dict[str, Any]], rep: Report, lossy: bool
) -> tuple[dict[str, list[_Claim]], Counter[str]]:
    """I1, I2, I3 from the event stream: claims follow ends, commits come from the
    current claim, at most one terminal outcome per invocation."""
    claims: dict[str, list[_Claim]] = defaultdict(list)
    terminals: Counter[str] = Counter()
    last_kind: dict[str, str] = {}
    for e in events:
        if e["sched"] is None or not e["job"]:
            continue
        inv, kind, attempt = f"{e['job']}@{e['sched']}", e["kind"], e["attempt"]
        mine = claims.get(inv, [])
        open_claim = mine[-1] if mine and mine[-1].end is None else None
        if kind == "claimed":
            if open_claim is not None:
                rep.violations.append(
                    f"I2 {inv}: attempt {attempt} claimed at {e['at']} while "
                    f"attempt {open_claim.attempt} was still held"
                )
            elif mine:
                prev = mine[-1]
                want = prev.attempt if prev.end == "released" else prev.attempt + 1
                if attempt != want and not lossy:
                    rep.violations.append(
                        f"I1 {inv}: attempt {attempt} claimed after attempt "
                        f"{prev.attempt} ended by {prev.end}; expected {want}"
                    )
            elif attempt != 1 and not lossy:
                rep.violations.append(f"I1 {inv}: first claim has attempt {attempt}")
            if terminals[inv] and not lossy:
                rep.violations.append(f"I3 {inv}: claimed again after its outcome was committed")
            claims[inv].append(_Claim(attempt, owner_pid(e["detail"]), e["at"]))
        elif (
            kind in ENDS
            or kind in TERMINAL
            or (kind == "dead_lettered" and last_kind.get(inv) == "lease_lost")
        ):
            if kind != "dead_lettered":
                if open_claim is None or open_claim.attempt != attempt:
                    if not lossy:
                        held = "none" if open_claim is None else open_claim.attempt
                        rep.violations.append(
                            f"I3 {inv}: {kind} by attempt {attempt}, but the "
                            f"current claim is {held}"
                        )
                else:
                    open_claim.end, open_claim.end_at = kind, e["at"]
            if kind in TERMINAL or kind == "dead_lettered":
                terminals[inv] += 1
                if kind == "dead_lettered":
                    rep.dead_lettered += 1
                if terminals[inv] == 2:
                    rep.duplicate_commits += 1
                    rep.violations.append(f"I3 {inv}: a second outcome ({kind}) was committed")
        last_kind[inv] = kind
    return claims, terminals


def _accounting(
    h: History, claims: dict[str, list[_Claim]], terminals: Counter[str], rep: Report
) -> None:
    """I4: every acknowledged one-off job reaches exactly one terminal outcome."""
    by_job: dict[str, list[str]] = defaultdict(list)
    for inv in set(claims) | set(terminals):
        by_job[inv.rsplit("@", 1)[0]].append(inv)
    lossy = any(f.kind == "data_loss" for f in h.faults)
    for job in sorted(h.expected):
        done = [inv for inv in by_job.get(job, []) if terminals[inv]]
        if not done:
            rep.lost += 1
            held = [c for inv in by_job.get(job, []) for c in claims.get(inv, [])]
            how = (
                f"last claim attempt {held[-1].attempt} ended by {held[-1].end}"
                if held
                else "never claimed"
            )
            if not lossy:
                rep.violations.append(f"I4 {job}: acknowledged but no outcome ({how})")
        elif len(done) > 1:
            rep.violations.append(f"I4 {job}: {len(done)} invocations of a one-off job")
    if h.drained:
        for inv, cs in sorted(claims.items()):
            if cs and cs[-1].end is None and not terminals[inv]:
                rep.violations.append(
                    f"I4 {inv}: attempt {cs[-1].attempt} still in flight after the run drained"
                )
    rep.lateness_ms = [
        c[0].at - int(inv.rsplit("@", 1)[1]) for inv, c in claims.items() if c and c[0].attempt == 1
    ]


def _recovery(h: History, claims: dict[str, list[_Claim]], rep: Report) -> None:
    """I5: an invocation whose owner died is taken back (its lease reaped, so it is due
    again) by the first claim round that runs once its lease has expired.

    The bound is an order of events, not a time on this box's clock. Every claim round
    (claim.lua) reaps the leases expired at its ``now`` before it claims, in one script,
    so its ``lease_lost`` events precede its ``claimed`` ones in the stream. A dead owner
    renews nothing: its lease ends at the latest ``lease_ms`` after its last renewal,
    which it sent before it died; ``slack_ms`` allows for Redis processing that renewal
    after the death. So a ``claimed`` event later than death + lease + slack that comes
    before the take-back is a round that skipped an expired lease: a violation, however
    fast or slow the box. How long the take-back took depends on when the survivors next
    claim (their timers, on a starved CPU: late), so it is a figure (``recovery_ms``: kill
    to reap; ``reclaim_ms``: kill to the next claim), not a bound. An outage needs no
    allowance: no round runs while Redis is unreachable."""
    claimed_at = sorted(e["at"] for e in h.events if e["kind"] == "claimed")
    for f in h.faults:
        if f.kind not in DEATH or f.pid is None:
            continue
        expired = f.at_ms + h.lease_ms + h.slack_ms  # the lease has ended by then
        later = [at for at in claimed_at if at > expired]
        for inv, cs in claims.items():
            for i, c in enumerate(cs):
                held = (
                    c.pid == f.pid
                    and c.at <= f.at_ms
                    and (c.end is None or (c.end_at or 0) > f.at_ms)
                )
                if not held or c.end in TERMINAL:
                    continue  # not its claim, or committed before the kill took effect
                nxt = cs[i + 1] if i + 1 < len(cs) else None
                if c.end != "lease_lost" or c.end_at is None:
                    rep.violations.append(
                        f"I5 {inv}: owner {f.pid} died at {f.at_ms:.0f} and "
                        f"its lease was never reaped (end: {c.end})"
                    )
                    continue
                rep.recovery_ms.append(c.end_at - f.at_ms)
                if later and later[0] < c.end_at:
                    rep.violations.append(
                        f"I5 {inv}: its owner {f.pid} died at {f.at_ms:.0f}, its lease "
                        f"had ended by {expired:.0f}, a claim round ran at {later[0]:.0f} "
                        f"and it was taken back only at {c.end_at:.0f}"
                    )
                if nxt is not None:
                    rep.reclaim_ms.append(nxt.at - f.at_ms)


def _cause(prev: dict[str, Any], cur: dict[str, Any], faults: list[Fault]) -> str | None:
    """The fault that explains execution ``cur`` following ``prev`` of one invocation."""
    lo, hi = prev["start_ms"], cur["start_ms"]
    for f in faults:
        end = f.until_ms if f.until_ms is not None else f.at_ms
        if f.pid is not None and f.pid == prev["pid"] and f.at_ms <= hi + 1000:
            if f.kind in DEATH:
                return "owner death"
            if f.kind == "stop":
                return "pause past the lease"
            if f.kind == "renew_fail":
                return "renewals failed"
        if f.pid is None and f.at_ms <= hi and end >= lo - 1000:
            if f.kind == "outage":
                return "Redis unreachable"
            if f.kind == "data_loss":
                return "Redis data loss"
            if f.kind == "slow_network":
                return "slow network"
    return None


def _executions(h: History, claims: dict[str, list[_Claim]], rep: Report, lossy: bool) -> None:
    """I6: more than one execution per invocation only when a fault explains it."""
    by_inv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for x in h.execs:
        by_inv[f"{x['job']}@{x['sched']}"].append(x)
    rep.executions = len(h.execs)
    retried = {
        (f"{e['job']}@{e['sched']}", e["attempt"]) for e in h.events if e["kind"] == "retried"
    }
    fences = Counter(x["fence"] for x in h.execs)
    for fence, n in fences.items():
        if n > 1:
            rep.violations.append(f"I2 fence {fence}: one claim was executed {n} times")
    for inv, xs in sorted(by_inv.items()):
        if inv not in claims and not lossy:
            rep.violations.append(f"I1 {inv}: executed but never claimed")
        xs.sort(key=lambda x: (x["start_ms"], x["fence"]))
        for prev, cur in zip(xs, xs[1:], strict=False):
            if (inv, prev["attempt"]) in retried and cur["attempt"] > prev["attempt"]:
                continue  # a retry after a recorded failure: a new attempt, not a duplicate
            cause = _cause(prev, cur, h.faults)
            rep.duplicates[cause or "unexplained"] += 1
            if cause is None:
                rep.violations.append(
                    f"I6 {inv}: executed again (attempt {cur['attempt']}, pid {cur['pid']}) "
                    f"after attempt {prev['attempt']} (pid {prev['pid']}) with no fault to "
                    "explain it"
                )


def _recurrence(h: History, rep: Report) -> None:
    """I7: a recurring job's occurrences sit on its grid; gaps are skips the stream shows."""
    firsts: dict[str, set[int]] = defaultdict(set)
    skipped: dict[str, list[int]] = defaultdict(list)
    for e in h.events:
        if e["job"] in h.recurring and e["sched"] is not None:
            if e["kind"] == "claimed" and e["attempt"] == 1:
                firsts[e["job"]].add(e["sched"])
            elif e["kind"] == "skipped":
                skipped[e["job"]].append(e["sched"])
    for job, period in h.recurring.items():
        scheds = sorted(firsts[job])
        for a, b in zip(scheds, scheds[1:], strict=False):
            if (b - a) % period:
                rep.violations.append(
                    f"I7 {job}: occurrences {a} and {b} are off the {period} ms grid"
                )
            elif b - a > period and not any(a < s < b for s in skipped[job]):
                rep.violations.append(
                    f"I7 {job}: {(b - a) // period - 1} occurrence(s) "
                    f"between {a} and {b} neither ran nor were skipped"
                )
