"""scheduler.cron against an independent oracle (hypothesis).

The oracle never iterates cron expressions and never maps wall times to instants: it walks
UTC instants one step (a minute, or a second for 6 fields) at a time, reads each instant's
wall time and fold from zoneinfo (instant -> wall, the opposite direction of the code under
test), and decides with a plain set-membership matcher over croniter's parsed fields
(itself checked against ``croniter.match``). The DST policy is applied from its words:
``first``/``last`` keep the first/second pass of a repeated wall time, ``shift`` runs at an
instant where the wall clock jumped over a matching time, ``skip`` does not.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import cron, cron_rules
from scheduler.model import Ambiguous, Cron, Missing

UTC = dt.timezone.utc
ZONES = [
    "Europe/Paris",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/St_Johns",
    "America/Santiago",
    "Pacific/Apia",
]


# ---- the oracle ---------------------------------------------------------------------


def matcher(expr: str) -> Callable[[dt.datetime], bool]:
    """Does the naive wall time ``w`` match ``expr``? Field sets from croniter's parser;
    day-of-month and day-of-week are OR-ed when both are restricted (cron's rule)."""
    fields, nth = croniter.expand(expr, second_at_beginning=True)
    assert not nth
    sets = [None if f == ["*"] else set(f) for f in fields]
    minute, hour, dom, month, dow = sets[:5]
    second = sets[5] if len(sets) == 6 else {0}

    def match(w: dt.datetime) -> bool:
        if (
            (second is not None and w.second not in second)
            or (minute is not None and w.minute not in minute)
            or (hour is not None and w.hour not in hour)
            or (month is not None and w.month not in month)
        ):
            return False
        dom_ok = dom is None or w.day in dom
        dow_ok = dow is None or (w.weekday() + 1) % 7 in dow
        if dom is not None and dow is not None:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    return match


def wall(z: ZoneInfo, x: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(x, z)


def oracle(c: Cron, a: int, b: int, step: int) -> list[int]:
    """The base occurrences in [a, b), by walking UTC instants ``step`` seconds apart."""
    z, match = ZoneInfo(c.tz), matcher(c.expr)
    out = []
    prev = wall(z, a - step).replace(tzinfo=None)
    for x in range(a, b, step):
        w = wall(z, x)
        naive = w.replace(tzinfo=None)
        if match(naive):
            repeated_later = w.fold == 0 and naive.replace(tzinfo=z, fold=1).timestamp() != x
            if c.ambiguous is Ambiguous.BOTH or (
                w.fold == 0 if c.ambiguous is Ambiguous.FIRST else not repeated_later
            ):
                out.append(x)
                prev = naive
                continue
        if c.missing is Missing.SHIFT and naive - prev > dt.timedelta(seconds=step):
            skipped = prev + dt.timedelta(seconds=step)
            while skipped < naive:  # wall times the clock jumped over at x
                if match(skipped):
                    out.append(x)
                    break
                skipped += dt.timedelta(seconds=step)
        prev = naive
    return out


@functools.cache
def transitions(tz: str, year: int) -> list[int]:
    """The instants in ``year`` where ``tz``'s UTC offset changes (12-hourly scan, then
    bisection; no zone keeps an offset for less than 12 hours)."""
    z = ZoneInfo(tz)
    start = int(dt.datetime(year, 1, 1, tzinfo=UTC).timestamp())
    found = []
    for h in range(2 * 366):
        lo, hi = start + h * 43200, start + (h + 1) * 43200
        if wall(z, lo).utcoffset() != wall(z, hi).utcoffset():
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (
                    (lo, mid) if wall(z, mid).utcoffset() == wall(z, hi).utcoffset() else (mid, hi)
                )
            found.append(hi)
    return found


# ---- expressions --------------------------------------------------------------------


def field(lo: int, hi: int, star_weight: int) -> st.SearchStrategy[str]:
    num = st.integers(lo, hi)
    rng = (
        st.tuples(num, num)
        .filter(lambda p: p[0] != p[1])
        .map(sorted)
        .map(lambda p: f"{p[0]}-{p[1]}")
    )  # croniter reads an equal range as '*': validate rejects it
    part = st.one_of(
        num.map(str),
        rng,
        st.tuples(rng, st.integers(1, max(1, (hi - lo) // 2))).map(lambda p: f"{p[0]}/{p[1]}"),
        st.integers(1, max(1, (hi - lo) // 2)).map(lambda s: f"*/{s}"),
    )
    listed = st.lists(part, min_size=1, max_size=3).map(",".join)
    return st.one_of(*[st.just("*")] * star_weight, listed)


MINUTES, SECONDS, DOM, MONTH, DOW = (
    field(0, 59, 1),
    field(0, 59, 2),
    field(1, 31, 12),
    field(1, 12, 12),
    field(0, 6, 10),
)
POLICIES = st.tuples(st.sampled_from(list(Ambiguous)), st.sampled_from(list(Missing)))


@st.composite
def near_transition(draw: st.DrawFn, six: bool, least: int, most: int) -> tuple[Cron, int]:
    """A schedule and an instant on the step grid ``least`` to ``most`` seconds before a real
    transition, the hour, day (and for 6 fields the minute) fields biased to match the wall
    times around the transition, so repeated and skipped times come up often (random day
    fields are the business of the "anywhere" test)."""
    tz = draw(st.sampled_from(ZONES))
    ts = transitions(tz, draw(st.integers(2008, 2030)))
    if not ts:
        tz, ts = "Europe/Paris", transitions("Europe/Paris", 2026)
    t = ts[draw(st.integers(0, len(ts) - 1))]
    z, step = ZoneInfo(tz), 1 if six else 60
    near = [wall(z, t - 1), wall(z, t)]  # the wall times either side of the change
    hours = draw(
        st.one_of(
            st.just("*"),
            st.sampled_from(near).map(lambda w: str(w.hour)),
            st.just(str((near[0].hour + 1) % 24)),  # a skipped hour
            st.just(f"{min(20, near[1].hour)}-{min(20, near[1].hour) + 3}"),
            st.just(f"{max(3, near[0].hour) - 3}-{max(3, near[0].hour)}"),
        )
    )
    day = near[0]
    days = [
        draw(st.sampled_from(["*", str(v)])) for v in (day.day, day.month, (day.weekday() + 1) % 7)
    ]
    mins = draw(MINUTES)
    if six:
        mins = draw(
            st.one_of(
                st.just(mins),
                st.sampled_from(near).map(lambda w: f"{w.minute}-59" if w.minute < 59 else "59"),
            )
        )
    expr = " ".join(([draw(SECONDS)] if six else []) + [mins, hours] + days)
    amb, miss = draw(POLICIES)
    a = (t - draw(st.integers(least, most))) // step * step
    return cron_rules.validate(Cron(expr, tz, amb, miss)), a


def check(c: Cron, a: int, span: int, step: int) -> None:
    want = oracle(c, a, a + span, step)
    got = list(cron.occurrences(c, a, a + span, "job"))
    assert got == want
    nxt = cron.next_after(c, a - 0.5, "job")
    if want:
        assert nxt == want[0]
    else:
        assert nxt is None or nxt >= a + span
    for x, y in zip(want[:20], want[1:21], strict=False):  # stepping agrees with the listing
        assert cron.next_after(c, x, "job") == y
        assert cron.next_after(c, x - 0.001, "job") == x


def fast(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@fast(40)
@given(near_transition(False, 3600, 20 * 3600))
def test_five_fields_match_the_oracle_across_transitions(case):
    check(*case, 24 * 3600, 60)


@fast(20)
@given(near_transition(True, 120, 1800))
def test_six_fields_match_the_oracle_across_transitions(case):
    check(*case, 2400, 1)


@fast(25)
@given(
    st.tuples(MINUTES, field(0, 23, 1), DOM, MONTH, DOW).map(" ".join),
    POLICIES,
    st.sampled_from(ZONES + ["UTC", "Asia/Kolkata"]),
    st.integers(1_000_000_000, 2_000_000_000),
)
def test_five_fields_match_the_oracle_anywhere(expr, pol, tz, t):
    check(cron_rules.validate(Cron(expr, tz, pol[0], pol[1])), t // 60 * 60, 24 * 3600, 60)


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        st.tuples(MINUTES, field(0, 23, 1), DOM, MONTH, DOW),
        st.tuples(SECONDS, MINUTES, field(0, 23, 1), DOM, MONTH, DOW),
    ).map(" ".join),
    st.datetimes(dt.datetime(2000, 1, 1), dt.datetime(2040, 1, 1)),
)
def test_the_oracle_matcher_agrees_with_croniter_match(expr, when):
    when = when.replace(microsecond=0, second=when.second if len(expr.split()) == 6 else 0)
    assert matcher(expr)(when) == croniter.match(expr, when, second_at_beginning=True)
