"""The records the scripts write, read back: events (one parser, batch entries expanded),
RUNNING entries, skipped ranges, dead letters, run history, due members and re-run lines,
task tokens and served-task lists, a result as stored JSON, add.lua's reply. Each format
has one parser, here (tests/unit/test_architecture.py holds that).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii as _quote  # what json.dumps does to a str
from typing import Any, NamedTuple, TypeGuard

from scheduler import validation
from scheduler.model import AddResult, Event, Skip

RESULT_LIMIT = validation.RESULT_LIMIT  # bytes of a stored result; a commit may pass maxmemory


def events(f: Mapping[str, str]) -> list[Event]:
    """The state changes of one entry of the namespace's event stream, oldest first: THE
    parser of the stream's format, which every reader goes through (lua/include/events.lua).
    An entry holds one change (fields kind, job, sched, attempt, detail, at; a claim may add
    ready; a field that is missing reads as empty), or every change of one kind made by one
    batch script call (fields kind, detail, at, n, batch: one
    ``<sched>|<attempt>|<ready>|<job>`` line per change; attempt is empty for a change
    of no invocation, as add.lua's ``scheduled``). An entry (or a batch's line) that does
    not parse (garbage written by hand) reads as one ``malformed`` event that quotes it:
    it made ``duetime events``, ``show`` and ``stats`` fail for the whole namespace."""
    kind, detail = f.get("kind", "?"), f.get("detail", "")
    try:
        at = int(f.get("at") or 0) / 1000
    except ValueError:
        return [_malformed(0.0, f.get("job", ""), f"an entry of kind {kind!r}", f)]
    lines = f.get("batch")
    if lines is None:
        sched, attempt, ready = f.get("sched", ""), f.get("attempt", ""), f.get("ready", "")
        try:
            return [
                Event(
                    at=at,
                    kind=kind,
                    job_id=f.get("job", ""),
                    scheduled=int(sched) / 1000 if sched else None,
                    attempt=int(attempt) if attempt else None,
                    detail=detail,
                    ready=int(ready) / 1000 if ready else None,
                )
            ]
        except ValueError:
            return [_malformed(at, f.get("job", ""), f"an entry of kind {kind!r}", f)]
    out = []
    for line in lines.split("\n"):
        try:
            sched, attempt, ready, job = line.split("|", 3)
            out.append(
                Event(
                    at,
                    kind,
                    job,
                    int(sched) / 1000,
                    int(attempt) if attempt else None,
                    detail,
                    int(ready) / 1000 if ready else None,
                )
            )
        except ValueError:
            out.append(_malformed(at, "", f"a line of a {kind!r} batch", line))
    return out


def _malformed(at: float, job_id: str, what: str, raw: object) -> Event:
    text = repr(raw)
    shown = text if len(text) <= 200 else text[:200] + "..."
    return Event(at, "malformed", job_id, detail=f"{what} that does not parse: {shown}")


class RunningEntry(NamedTuple):
    """One entry of the namespace's RUNNING hash (token -> ``gen|sched|attempt|stalls|
    fence|job``, sched followed by ``@<ready>`` when its claim's ready is later;
    lua/include/issue.lua writes it), times in epoch seconds."""

    generation: int
    scheduled: float
    attempt: int
    stalls: int
    fence: int
    job_id: str
    ready: float | None = None  # its claim's ready, when later than scheduled


_AT_READY = re.compile(r"([0-9]+)(?:@([0-9]+))?")


def _at_ready(text: str) -> tuple[int, int | None]:
    """``<ms>`` or ``<ms>@<ready ms>`` (digits only, as the scripts read them)."""
    m = _AT_READY.fullmatch(text)
    if not m:
        raise ValueError(f"not <ms> or <ms>@<ms>: {text!r}")
    return int(m[1]), None if m[2] is None else int(m[2])


#: A job hash's small fields, packed into its one field ``st`` (layout 4), in this order:
#: their values joined by ``,``, empty where a field is absent (lua/include/st.lua).
JOB_ST = (
    "gen",
    "kind",
    "e",
    "next",
    "ready",
    "running",
    "attempts",
    "cancelled",
    "paused",
    "queued",
    "retries",
    "runs",
    "failures",
    "lists",
    "started",
    "keep",
)
_JOB_ST_BYTES = tuple(name.encode() for name in JOB_ST)
ST_PROBLEM = f'field st is not {len(JOB_ST)} values joined by ","'  # the scripts' words


def job_hash(h: Mapping[Any, Any], *, strict: bool = False) -> dict[Any, Any]:
    """A job hash (an HGETALL reply, ``str`` or ``bytes``) with its fields as the scripts
    read them: ``st``'s values as fields of their own in place of any such field (an empty
    one is absent, but ``e``), as layout 3 and before kept them; a hash without ``st`` as it
    is. One whose ``st`` does not split into its values: ``ValueError`` if ``strict`` (a
    readout says the job is malformed, as the scripts would), else as it is."""
    text = "st" in h
    packed = h.get("st") if text else h.get(b"st")
    if packed is None:
        return dict(h)
    values = packed.split("," if text else b",")
    if len(values) != len(JOB_ST):
        if strict:
            raise ValueError(ST_PROBLEM)
        return dict(h)
    names = JOB_ST if text else _JOB_ST_BYTES
    out = {k: v for k, v in h.items() if k not in names and k != ("st" if text else b"st")}
    for name, v in zip(names, values, strict=True):
        if v or name in ("e", b"e"):
            out[name] = v
    return out


def job_fields(names: Sequence[str]) -> tuple[str, ...]:
    """The fields an HMGET of a job's ``names`` asks for: them, and ``st``."""
    return (*names, "st")


def job_row(names: Sequence[str], row: Sequence[Any]) -> list[Any]:
    """The values of ``names`` (None where absent) from an HMGET of ``job_fields(names)``."""
    h = job_hash({k: v for k, v in zip(job_fields(names), row, strict=True) if v is not None})
    return [h.get(name) for name in names]


def running_entry(data: str) -> RunningEntry:
    """Parse one RUNNING entry (the one parser of that format on the Python side)."""
    gen, sched_text, attempt, stalls, fence, job = data.split("|", 5)
    sched, ready = _at_ready(sched_text)
    return RunningEntry(
        int(gen),
        sched / 1000,
        int(attempt),
        int(stalls),
        int(fence),
        job,
        None if ready is None else ready / 1000,
    )


def running_entries(entries: Mapping[str, str]) -> dict[str, RunningEntry]:
    """The RUNNING hash's entries that parse, by token, in its order: one that does not
    (garbage) is left to the claims' reaper and ``duetime doctor``, never a failed
    readout (it made ``duetime ls`` fail for the whole namespace)."""
    out = {}
    for token, data in entries.items():
        try:
            out[token] = running_entry(data)
        except (ValueError, TypeError):
            continue
    return out


def tokens_of(entries: Mapping[str, str], job_id: str) -> list[str]:
    """The tokens of ``job_id``'s entries in the RUNNING hash ``entries``."""
    return [t for t, r in running_entries(entries).items() if r.job_id == job_id]


def skip_entry(data: str) -> Skip:
    """Parse one entry of a job's skip list (``skips:<job>``: ``first|last|count|reason``,
    ms)."""
    first, last, count, reason = data.split("|", 3)
    return Skip(int(first) / 1000, int(last) / 1000, int(count), reason)


def dead_letter(job_id: str, data: str) -> Event:
    """Parse one entry of a job's dead-letter list (``dead:<job>``: JSON ``at``, ``sched``,
    ``attempt``, ``reason``; ms) as its ``dead_lettered`` event."""
    e = json.loads(data)
    return Event(
        e["at"] / 1000, "dead_lettered", job_id, e["sched"] / 1000, e["attempt"], e["reason"]
    )


def run_entry(data: str) -> tuple[float, int, float | None, float, str]:
    """Parse one entry of a job's run list (``runs:<job>``, lua/include/history.lua:
    ``sched|attempt|fence|started|ended|outcome``, ms): scheduled, attempt, started (None:
    not known), ended (epoch seconds) and outcome; ValueError if it does not parse."""
    sched, attempt, _fence, started, ended, outcome = data.split("|", 5)
    at = int(started) / 1000 if started else None
    return int(sched) / 1000, int(attempt), at, int(ended) / 1000, outcome


def member_job(member: str) -> str:
    """The job id of a due member (``<seq>|s|<job>``, ``<seq>|r|gen|sched[@ready]|attempt|
    stalls|<job>``; include/due.lua) or of a listing index entry (the job id itself)."""
    head = member.split("|", 2)
    if len(head) == 3 and head[1] == "s":
        return head[2]
    if len(head) == 3 and head[1] == "r":
        return member.split("|", 6)[-1]
    return member


def is_retry(member: str) -> bool:
    """Whether a due member is a retry's (``<seq>|r|...``: it holds its due time in its
    score only; the job hash counts pending retries, ``retries``)."""
    return member.split("|", 2)[1:2] == ["r"]


def queued_due(text: str) -> int:
    """The due time (ms) of a job's held occurrence, field ``queued`` (``<ms>|<k>``)."""
    return int(text.split("|", 1)[0])


_RERUN_LINE = re.compile(r"([0-9]+) ([^\n]+)\n")


def rerun_dues(text: str) -> list[int]:
    """The due times (ms) of a job's waiting re-runs, field ``reruns`` (lines ``<ms>
    <member>``, lua/include/reruns.lua); ValueError if it does not parse."""
    lines = _RERUN_LINE.findall(text)
    if sum(len(s) + len(m) + 2 for s, m in lines) != len(text):
        raise ValueError('field reruns is not lines of "<ms> <due member>"')
    return [int(s) for s, _ in lines]


def task_token(name: str) -> str:
    """A task name as job definitions spell it: JSON-escaped, without its quotes (how
    claim.lua names tasks, lua/include/serve.lua)."""
    return _quote(name)[1:-1]


def served_text(names: Sequence[str] | None) -> str:
    """claim.lua's list of the tasks a replica serves: ``"*"`` (None: every task), else
    ``"\n<task>\n...\n"`` (``"\n"``: none)."""
    return "*" if names is None else "\n" + "".join(task_token(n) + "\n" for n in names)


def served_names(text: str) -> list[str] | None:
    """``served_text`` read back (the ``tasks`` hash): the names, None for every task;
    a token that does not read back is shown as stored."""
    if text == "*":
        return None
    return [token_name(t) for t in text.split("\n") if t]


def token_name(token: str) -> str:
    """``task_token`` read back."""
    try:
        name = json.loads('"' + token + '"')
    except ValueError:
        return token
    return name if isinstance(name, str) else token


def owner_of(token: str) -> str:
    """The replica id inside a claim token (``<owner>:<n>``)."""
    return token.rsplit(":", 1)[0]


def _shown(value: Any) -> str:
    """``repr(value)``, or a note when the value's own ``__repr__`` fails (user code: an
    exception here used to fail the commit, and the job ran again after its lease)."""
    try:
        return repr(value)
    except BaseException as exc:  # noqa: BLE001 - anything may come out of user code
        return f"<a {type(value).__name__} whose repr() failed: {type(exc).__name__}>"


def result_json(value: Any) -> str:
    """A job's return value as JSON text (its repr, as a JSON string, if not JSON); a
    result over RESULT_LIMIT bytes is stored as a note saying so (the commit path may
    write when Redis is out of memory, so what it writes stays small)."""
    if value is None:  # the common case, without json.dumps
        return "null"
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):  # a set, NaN, a cycle, too deep
        text = json.dumps(_shown(value))
    if len(text) > RESULT_LIMIT:
        return json.dumps(
            f"<result of {len(text)} bytes not stored: over the {RESULT_LIMIT}-byte limit>"
        )
    return text


def is_int(value: object) -> TypeGuard[str]:
    """A Redis counter's text that ``int()`` reads (digits, an optional minus)."""
    return isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii()


def add_result(reply: list[Any]) -> AddResult:
    """add.lua's reply as an ``AddResult``."""
    outcome, due_in = reply[:2]
    return AddResult(outcome, None if int(due_in) < 0 else int(due_in) / 1000)
