"""Time on the command line: ``--at``/``--start``/``--end``/``--anchor`` take an instant
(ISO 8601, read in the local zone without ``Z`` or an offset, or epoch seconds) and
``--in``/``--every``/``--jitter`` a duration (``90s``, ``1h30m``, ``PT1H``, or seconds);
the grammar is ``scheduler.timeinput``'s.

Each instant is echoed on stderr as it was understood (UTC, local time, how far away), so
a time read in the wrong zone is seen before anything runs. Bad input ends the command
with one line and exit 2, before anything is written.
"""

from __future__ import annotations

import time

import click

from scheduler import timeinput
from scheduler.cli.app import fail

EXIT_USAGE = 2
INSTANT = "TIME"
DURATION = "DURATION"
INSTANT_HELP = "ISO 8601 (2030-03-01T14:30 is local time; add Z or +01:00) or epoch seconds"
DURATION_HELP = "90s, 1h30m, 500ms, 2d, PT1H30M, or seconds"


def instants(
    *given: tuple[str, str | None],
    allow_past: bool = True,
    now: float | None = None,
    due: bool = True,
) -> list[float | None]:
    """Epoch seconds of each ``(flag, text)`` instant option (None where not given): all
    are parsed first (bad input: one line, exit 2), then each is echoed on stderr as it
    was understood. With ``allow_past=False`` one more than 24 h in the past is refused
    (``--allow-past``). ``due=False``: the instants are not due times (a past one is not
    echoed as "due now")."""
    now = time.time() if now is None else now
    out: list[float | None] = []
    try:
        for flag, text in given:
            epoch = None if text is None else timeinput.parse_instant(text, flag).timestamp()
            if epoch is not None:
                timeinput.check_past(epoch, now, flag, allow_past, "--allow-past")
            out.append(epoch)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    for (flag, text), epoch in zip(given, out, strict=True):
        if epoch is not None:
            click.echo(f"{flag} {text} read as {timeinput.describe(epoch, now, due=due)}", err=True)
    return out


def duration(flag: str, text: str | None) -> float | None:
    """Seconds of a duration option (None if not given); bad input: exit 2."""
    if text is None:
        return None
    try:
        return timeinput.parse_duration(text, flag)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
