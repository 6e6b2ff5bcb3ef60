"""What duetime accepts as a ``Cron`` schedule: ``validate`` turns what a user wrote into
a normalised ``Cron``, or says what to fix in one ``ValueError``.

Not supported: 7 fields (a year column), croniter's hashed/random ``H``/``R`` fields (a
random field would differ between replicas: use ``jitter``), and a range whose ends are
one value, such as ``5-5``, ``05-5`` or ``jan-1`` (croniter reads it as the whole field,
``*``). Day-of-month and day-of-week are OR-ed when both are restricted (croniter's
default, as in Vixie cron). When such an expression fires: ``cron.py``.
"""

from __future__ import annotations

import math
import re
from zoneinfo import ZoneInfoNotFoundError

from croniter import CroniterError

from scheduler import cron as crons
from scheduler.model import Ambiguous, Cron, Missing

__all__ = ["validate"]

_HASHED = re.compile(r"^[hr](\(|/|$)", re.IGNORECASE)


_RANGE_PART = re.compile(r"^(\w+)-(\w+)(/\d+)?$")


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


_NAMES = {**{m: i + 1 for i, m in enumerate(_MONTHS)}, **{d: i for i, d in enumerate(_DAYS)}}


def _one_value_range(part: str) -> bool:
    """True for a range whose two ends are one value however written (``5-5``, ``05-5``,
    ``jan-1``, ``sun-0``): croniter reads each as the whole field, ``*``."""
    m = _RANGE_PART.match(part.lower())
    if not m:
        return False
    ends = [_NAMES.get(end, int(end) if end.isdigit() else None) for end in m.group(1, 2)]
    return ends[0] is not None and ends[0] == ends[1]


_FORMS = (
    "5 fields 'minute hour day-of-month month day-of-week' (e.g. '30 2 * * *'), or 6 "
    "with seconds first (e.g. '*/10 * * * * *' = every 10 s), or an alias like '@daily'"
)


_NEVER_YEARS = 10  # an expression with no occurrence in this many years is rejected
# Zone files whose zone is the host's choice (its own zone, its POSIX default), and the
# "right/" zones (leap seconds counted): each host may read them differently
HOST_ZONES = frozenset({"localtime", "posixrules"})


def validate(c: Cron) -> Cron:
    """A normalised copy of ``c`` (whitespace collapsed, policy strings turned into enums,
    jitter a float), or ValueError saying what to fix: an expression croniter rejects, the
    wrong number of fields, ``H``/``R`` fields, an expression with no occurrence within 10
    years (e.g. '0 0 30 2 *'), an unknown IANA zone, an unknown policy, or a jitter that is
    not a finite number >= 0."""
    if not isinstance(c.expr, str):
        raise ValueError(f"a cron expression is a string, got {c.expr!r}")
    expr = " ".join(c.expr.split())
    fields = expr.split(" ") if expr else []  # (''.split(" ") is one empty field)
    if not expr.startswith("@"):
        if len(fields) == 7:
            raise ValueError(
                f"cron expression {expr!r} has 7 fields: a year column is not "
                f"supported; use {_FORMS}"
            )
        if len(fields) not in (5, 6):
            raise ValueError(f"cron expression {expr!r} has {len(fields)} fields; use {_FORMS}")
        for f in fields:
            if any(_HASHED.match(part) for part in f.split(",")):
                raise ValueError(
                    f"cron expression {expr!r}: hashed/random fields ('H', 'R') "
                    "are not supported (replicas would disagree); write the "
                    "value and use jitter= to spread runs"
                )
            if any(_one_value_range(part) for part in f.split(",")):
                raise ValueError(
                    f"cron expression {expr!r}: croniter reads a range whose ends are "
                    "one value (like '5-5', '05-5', 'jan-1', 'sun-0') as the whole field "
                    "('*'); write the single value (e.g. '5') or '*'"
                )
    try:
        it = crons.Naive(crons.prototype(expr), crons.PARSE_FROM)
    except (CroniterError, ValueError) as e:
        raise ValueError(f"invalid cron expression {expr!r} ({e}); use {_FORMS}") from None
    first = it.next()
    if first is None or first.year - crons.PARSE_FROM.year >= _NEVER_YEARS:
        raise ValueError(
            f"cron expression {expr!r} never fires (no date matches within "
            f"{_NEVER_YEARS} years): check the day-of-month and month fields"
        )
    if not isinstance(c.tz, str):
        raise ValueError(f"Cron.tz is an IANA zone name like 'Europe/Paris', got {c.tz!r}")
    if c.tz in HOST_ZONES or c.tz.startswith("right/"):
        raise ValueError(
            f"time zone {c.tz!r} is this host's own file, not one zone everywhere (replicas "
            "on other hosts would plan other times): use a name like 'Europe/Paris' or 'UTC'"
        )
    try:
        crons.zone(c.tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"unknown IANA time zone {c.tz!r}: use a name like 'Europe/Paris', "
            "'America/New_York' or 'UTC'"
        ) from None
    return _normalised(c, expr, c.tz)


def _normalised(c: Cron, expr: str, tz: str) -> Cron:
    try:
        amb = Ambiguous(c.ambiguous)
    except ValueError:
        raise ValueError(
            f"Cron.ambiguous must be one of {[a.value for a in Ambiguous]}, got {c.ambiguous!r}"
        ) from None
    try:
        miss = Missing(c.missing)
    except ValueError:
        raise ValueError(
            f"Cron.missing must be one of {[m.value for m in Missing]}, got {c.missing!r}"
        ) from None
    j = c.jitter
    if isinstance(j, bool) or not isinstance(j, (int, float)) or not 0 <= j < math.inf:
        raise ValueError(f"Cron.jitter must be a finite number of seconds >= 0, got {j!r}")
    return Cron(expr=expr, tz=tz, ambiguous=amb, missing=miss, jitter=float(j))
