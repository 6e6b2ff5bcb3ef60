"""Time as people write it: ISO 8601 instants, and durations such as ``90s`` or ``PT1H30M``.

One grammar for every entry point: the CLI's ``--at``/``--start``/``--end``/``--anchor``
(instants) and ``--in``/``--every``/``--jitter`` (durations), and, in Python, every
delay or interval given as a string (``after(fn, "90s")``, ``every="1h"``). Python
instants stay aware datetimes or epoch seconds (a string there is refused).

Durations (never negative; months and years are refused: they have no fixed length)::

    90   1.5   90s   500ms   1h30m   1h 30m   2d   1w   250us   PT1H30M   P1DT2H   P2W

Instants: ISO 8601, extended (``2025-03-01T14:30:00.25+01:00``) or basic
(``20250301T143000Z``) format, ``T`` or a space between date and time, ``Z`` or an offset
(``+01:00``, ``+0100``, ``+01``); a date alone is midnight. **Without ``Z`` or an
offset, the time is read in the local zone** (the ``TZ`` environment variable, else the
system's). A string of digits is epoch seconds. Fractions of a second beyond the
microsecond are rounded up, never down (a job may not start before the time given).

Python 3.10's ``datetime.fromisoformat`` reads only what ``isoformat()`` writes (no
``Z``, no basic format, no ``+0100``), 3.11's reads more: so this module parses with its
own small grammar and the ``datetime`` constructor, and reads the same on every version.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from fractions import Fraction

#: an instant further back than this is refused unless the caller allows the past
PAST_LIMIT = 24 * 3600.0

DURATION_EXAMPLES = "90s, 1h30m, 500ms, 2d, PT1H30M, or a number of seconds"
INSTANT_EXAMPLES = (
    "2030-03-01T14:30 (local time), 2030-03-01T13:30Z, 2030-03-01T14:30+01:00, "
    "2030-03-01, or epoch seconds"
)

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_UNITS: dict[str, Fraction] = {
    "w": Fraction(7 * 86400),
    "d": Fraction(86400),
    "h": Fraction(3600),
    "m": Fraction(60),
    "s": Fraction(1),
    "ms": Fraction(1, 1000),
    "us": Fraction(1, 1_000_000),
    "µs": Fraction(1, 1_000_000),
}
_PLAIN = re.compile(rf"{_NUMBER}", re.ASCII)  # ASCII: "٣" is not a duration
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))  # longest first: ms before m
_PART = re.compile(rf"\s*({_NUMBER})\s*({_UNIT})", re.ASCII)
_ISO_NUMBER = r"(\d+(?:[.,]\d+)?)"
_ISO_DURATION = re.compile(
    rf"P(?:{_ISO_NUMBER}Y)?(?:{_ISO_NUMBER}M)?(?:{_ISO_NUMBER}W)?(?:{_ISO_NUMBER}D)?"
    rf"(?:T(?:{_ISO_NUMBER}H)?(?:{_ISO_NUMBER}M)?(?:{_ISO_NUMBER}S)?)?",
    re.IGNORECASE | re.ASCII,
)
_ISO_FACTORS = (None, None, _UNITS["w"], _UNITS["d"], _UNITS["h"], _UNITS["m"], _UNITS["s"])

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})|(\d{4})(\d{2})(\d{2})(?=[Tt])", re.ASCII)
_TIME_EXT = re.compile(r"(\d{2})(?::(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?", re.ASCII)
_TIME_BASIC = re.compile(r"(\d{2})(?:(\d{2})(?:(\d{2})(?:[.,](\d+))?)?)?", re.ASCII)
_ZONE = re.compile(r"[Zz]|([+-])(\d{2})(?::?(\d{2}))?", re.ASCII)


def _fraction(text: str) -> Fraction:
    return Fraction(text.replace(",", "."))


def parse_duration(text: str, name: str = "duration") -> float:
    """Seconds from a duration string (see the module docstring); ``ValueError`` if
    ``text`` is not one."""
    s = text.strip()
    if _PLAIN.fullmatch(s):
        return float(Fraction(s))
    if s[:1] in ("P", "p"):
        return float(_iso_duration(s, text, name))
    total, pos = Fraction(0), 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            break
        total += Fraction(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == len(s) and pos > 0:
        return float(total)
    if s.startswith("-"):
        raise ValueError(f"{name} must not be negative, got {text!r}")
    raise ValueError(
        f"{name}: {text!r} is not a duration (units: w d h m s ms us); "
        f"examples: {DURATION_EXAMPLES}"
    )


def _iso_duration(s: str, text: str, name: str) -> Fraction:
    m = _ISO_DURATION.fullmatch(s)
    if m is None or not any(m.groups()) or s.upper().endswith("T"):
        raise ValueError(
            f"{name}: {text!r} is not an ISO 8601 duration (PnW, PnDTnHnMnS); "
            f"examples: {DURATION_EXAMPLES}"
        )
    years, months = m.group(1), m.group(2)
    if (years and _fraction(years)) or (months and _fraction(months)):
        raise ValueError(
            f"{name}: {text!r} counts months or years, which have no fixed length; "
            "give days (P30D) or use a cron schedule"
        )
    total = Fraction(0)
    for value, factor in zip(m.groups(), _ISO_FACTORS, strict=True):
        if value and factor is not None:
            total += _fraction(value) * factor
    return total


def parse_instant(text: str, name: str = "time") -> dt.datetime:
    """An aware datetime from an ISO 8601 instant or epoch seconds (see the module
    docstring); a time without ``Z`` or an offset is read in the local zone.
    ``ValueError`` if ``text`` is not one."""
    s = text.strip()
    try:
        if _PLAIN.fullmatch(s):
            return dt.datetime.fromtimestamp(float(Fraction(s)), dt.timezone.utc)
        parsed = _iso_instant(s)
    except (ValueError, OverflowError, OSError) as exc:
        raise ValueError(f"{name}: {text!r} is not a valid time: {exc}") from None
    if parsed is None:
        raise ValueError(f"{name}: {text!r} is not a time; examples: {INSTANT_EXAMPLES}")
    return parsed


def _iso_instant(s: str) -> dt.datetime | None:
    """The grammar, piece by piece: date, then [T or space, time], then [zone]."""
    d = _DATE.match(s)
    if d is None:
        return None
    year, month, day = (int(g) for g in (d.groups()[:3] if d.group(1) else d.groups()[3:]))
    pos, basic = d.end(), d.group(1) is None
    hour = minute = second = 0
    micros = 0
    has_time = pos < len(s) and s[pos] in "Tt "
    if has_time:
        t = (_TIME_BASIC if basic else _TIME_EXT).match(s, pos + 1)
        if t is None:
            return None
        hour, minute, second = (int(g or 0) for g in t.groups()[:3])
        if t.group(4):
            micros = math.ceil(Fraction("0." + t.group(4)) * 1_000_000)  # never earlier
        pos = t.end()
    tz: dt.tzinfo | None = None
    if pos < len(s):
        z = _ZONE.fullmatch(s, pos)
        if z is None or not has_time:
            return None
        tz = dt.timezone.utc
        if z.group(1):
            hours, minutes = int(z.group(2)), int(z.group(3) or 0)
            if hours > 23 or minutes > 59:
                raise ValueError(f"the offset {s[pos:]} is out of range (-23:59 to +23:59)")
            offset = dt.timedelta(hours=hours, minutes=minutes)
            tz = dt.timezone(-offset if z.group(1) == "-" else offset)
    when = dt.datetime(year, month, day, hour, minute, second) + dt.timedelta(microseconds=micros)
    # a time without a zone is local time (astimezone() on a naive datetime assumes so)
    return when.replace(tzinfo=tz) if tz is not None else when.astimezone()


def check_past(when: float, now: float, name: str, allow_past: bool, how: str) -> None:
    """A past instant is "due now", but one more than ``PAST_LIMIT`` back is refused
    (likely a mistake: a wrong year, a time zone, milliseconds read as seconds) unless
    ``allow_past``; ``how`` names the way to allow it (``--allow-past``)."""
    if allow_past or when >= now - PAST_LIMIT:
        return
    raise ValueError(
        f"{name} {iso_utc(when)} is {span(now - when)} in the past; a past time runs "
        f"at once, but more than 24 h back is refused as a likely mistake: pass {how} "
        "if you mean it"
    )


# What a datetime cannot show (an epoch past the year 9999, or before 1): fromtimestamp's
# errors on such a value, which a display must survive (data of an older version, garbage).
OUT_OF_RANGE = (OverflowError, ValueError, OSError)


def beyond(epoch: float) -> str:
    """An instant a datetime cannot show, shown as its epoch seconds."""
    return f"epoch {epoch:.3f} (outside the years 1-9999)"


def iso_utc(epoch: float) -> str:
    """``2025-03-01T13:30:00Z`` (with the fraction of a second when there is one)."""
    try:
        when = dt.datetime.fromtimestamp(epoch, dt.timezone.utc)
    except OUT_OF_RANGE:
        return beyond(epoch)
    us = when.microsecond
    spec = "microseconds" if us % 1000 else "milliseconds" if us else "seconds"
    return when.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def iso_ms(t: float | None) -> str | None:
    """Epoch seconds as ISO 8601 in UTC with milliseconds (``None`` stays ``None``), as
    the readouts' JSON shows instants."""
    if t is None:
        return None
    try:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds")
    except OUT_OF_RANGE:
        return beyond(t)


def local(epoch: float) -> str:
    """``2025-03-01 14:30:00 CET``: the instant in the local zone, for people."""
    try:
        when = dt.datetime.fromtimestamp(epoch).astimezone()
    except OUT_OF_RANGE:  # the year 1 in UTC can be the year 0 in the local zone
        return beyond(epoch)
    return f"{when:%Y-%m-%d %H:%M:%S} {when.tzname() or when.strftime('%z')}"


def span(seconds: float) -> str:
    """A rough length for people: ``45 s``, ``12 min``, ``3 h 20 min``, ``4 d 2 h``."""
    s = abs(seconds)
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{s // 60:.0f} min"
    if s >= 2 * 365 * 86400:
        return f"{s / (365.25 * 86400):.1f} years"
    if s < 86400:
        h, rest = divmod(s, 3600)
        return f"{h:.0f} h {rest // 60:.0f} min"
    d, rest = divmod(s, 86400)
    return f"{d:.0f} d {rest // 3600:.0f} h"


def describe(epoch: float, now: float, *, due: bool = True) -> str:
    """What an instant was understood as: UTC, local time, and how far away. A past one
    that is a due time (``--at``) is "due now"; ``due=False`` for an instant that is not
    (a backfill window's bound, a grid's anchor)."""
    delta = epoch - now
    rel = f"in {span(delta)}" if delta >= 0 else f"{span(delta)} ago"
    rel += ": due now" if delta < 0 and due else ""
    return f"{iso_utc(epoch)} = {local(epoch)} local ({rel})"
