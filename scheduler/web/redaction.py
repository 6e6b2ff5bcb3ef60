"""What ``duetime web --redact-args`` hides: a job's arguments, and every text its own
code wrote, which may quote them (a result, an error message, the messages inside a
traceback). Kept: an error's exception type, and a traceback's frames (file, line,
function and source line: the code's text, not its values), so the operator still sees
what failed and where.

The rule is a whitelist: a traceback line is kept only when it has the shape of a frame,
of a source line under one, or of Python's fixed headers; any other line (a message, or
a message's continuation) becomes its exception type or ``(redacted)``.
"""

from __future__ import annotations

import re
from typing import Any

from scheduler.model import Event

REDACTED = "(redacted)"
JOB_TEXT_KINDS = frozenset({"failed", "retried", "dead_lettered"})  # events quoting an error

_EXCEPTION = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")
_OWN = frozenset(  # duetime's own failures: their messages quote no argument
    {
        "InvocationTimeout",
        "InvocationCancelled",
        "TaskNotRegisteredError",
        "NotAwaitedError",
        "NotIteratedError",
    }
)
_HEADERS = (
    "Traceback (most recent call last):",
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def error(text: str | None) -> str | None:
    """A stored error as its exception type only (``"KeyError: (redacted)"``). A job's
    error is always stored as ``"Type: message"``; a text of another shape was written by
    duetime (``"lease lost"``) and is kept, as are the messages of duetime's own
    exceptions (a timeout, a cancellation, an unknown task)."""
    if not text:
        return text
    found = _EXCEPTION.match(text)
    return text if not found else _typed(found.group(1), text)


def _typed(name: str, text: str) -> str:
    return text if name.rsplit(".", 1)[-1] in _OWN else f"{name}: {REDACTED}"


def traceback(text: str | None) -> str | None:
    """A traceback with its frames kept and every message line replaced (see above)."""
    if not text:
        return text
    out: list[str] = []
    in_frame = False  # the lines after '  File ...' that start with four spaces: its source
    for line in text.splitlines():
        if line.startswith('  File "'):
            in_frame = True
        elif not (in_frame and line.startswith("    ")):
            in_frame = False
            if line.strip() and line not in _HEADERS:
                found = _EXCEPTION.match(line)
                line = _typed(found.group(1), line) if found else REDACTED
        out.append(line)
    return "\n".join(out)


def job(row: dict[str, Any]) -> dict[str, Any]:
    """A job's JSON row (``render.job_json``'s shape) with its code's texts redacted."""
    if row.get("last_result") is not None:
        row["last_result"] = REDACTED
    if row.get("progress") is not None:  # a job's own data, as its result
        row["progress"] = {**row["progress"], "value": REDACTED}
    row["last_error"] = error(row.get("last_error"))
    row["last_traceback"] = traceback(row.get("last_traceback"))
    for dead in row.get("dead_letters", []):  # each one's detail is the error that ended it
        dead["detail"] = _detail(dead["detail"])
    return row


def event(e: Event) -> Event:
    """An event with an error it quotes redacted (its tracebacks too)."""
    if e.kind in JOB_TEXT_KINDS and e.detail:
        return e._replace(detail=_detail(e.detail) or "")
    return e


def _detail(text: str | None) -> str | None:
    return traceback(text) if text and "\n" in text else error(text)
