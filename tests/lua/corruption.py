"""The corruption suite's instruments (tests/lua/test_corruption.py): a dump of EVERY key of
a namespace (TYPE and full value), the diff of two dumps attributed per item (a job id, or
a quarantine entry id ``m:..`` / ``t:..``), and the oracle: what the scripts must make of a
planted corruption, mirrored from lua/include/check.lua in plain Python.

An item's *effect* is the set of change categories a script call left for it:

  due- / due+     a due member of the item removed / added
  hash            its job hash changed (the key exists before and after)
  jobkey-         its job key is gone           data+   quarantined:<item> appeared
  running+/-      a RUNNING entry of it added / removed (lease+/- likewise)
  record          its entry in the ``quarantined`` hash appeared
  ev:<kind>       one event of that kind for it (the stream)
  dead, skips, bf its dead letters, skipped ranges, backfill set changed

"Whole effect or nothing": per item, a call leaves either no change at all or exactly one
of the whole effects the script may have on it (test_corruption.py says which).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from scheduler.stores.redis.protocol import records

DEF_MAX = 1048576  # lua/include/check.lua
FIELD_MAX = 1024
DEFAULTS = {
    b"lane": b"default",
    b"k": b"0",
    b"running": b"0",
    b"retries": b"0",
    b"misfire": b"skip",
    b"overlap": b"skip",
    b"delivery": b"at_least_once",
    b"max_stalls": b"3",
}

# ---- the dump --------------------------------------------------------------------------


def dump(r: redis.Redis, prefix: str) -> dict[str, tuple[str, Any]]:
    """Every key under ``prefix`` (without it) -> (TYPE, full value). ``r`` answers bytes.
    The reconciler's cursor is left out: a store call may run a reconciler pass first (a
    script of its own), and the cursor is all an idle pass writes."""
    keys = sorted(k for k in r.keys(prefix.encode() + b"*") if k != prefix.encode() + b"reconcile")
    with r.pipeline(transaction=False) as p:
        for k in keys:
            p.type(k)
        kinds = [t.decode() for t in p.execute()]
    with r.pipeline(transaction=False) as p:
        for k, t in zip(keys, kinds, strict=True):
            {
                "string": lambda k: p.get(k),
                "hash": lambda k: p.hgetall(k),
                "zset": lambda k: p.zrange(k, 0, -1, withscores=True),
                "list": lambda k: p.lrange(k, 0, -1),
                "set": lambda k: p.smembers(k),
                "stream": lambda k: p.xrange(k),
            }[t](k)
        values = p.execute()
    out = {}
    for k, t, v in zip(keys, kinds, values, strict=True):
        if t == "zset":
            v = dict(v)
        elif t == "set":
            v = frozenset(v)
        out[k[len(prefix) :].decode("utf-8", "surrogateescape")] = (t, v)
    return out


# ---- the oracle: parsing rules of the scripts, in Python ---------------------------------


def lua_int(v: bytes) -> int | None:
    """core.lua's int(): digits only (ASCII), an optional minus, at most 16 characters."""
    if len(v) <= 16 and re.fullmatch(rb"-?[0-9]+", v):
        return int(v)
    return None


def utf8(v: bytes) -> bool:
    try:
        v.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def parse_member(member: bytes) -> dict[str, Any] | None:
    """include/due.lua's parse_member."""
    if len(member) > 2048:
        return None
    m = re.fullmatch(rb"([0-9a-fA-F]+)\|([A-Za-z])\|(.+)", member, re.DOTALL)
    if not m or len(m.group(1)) > 16:
        return None
    seq, kind, rest = m.groups()
    out: dict[str, Any] = {"seq": seq, "kind": kind}
    if kind == b"s":
        out["job"] = rest
    elif kind == b"r":
        r = re.fullmatch(
            rb"([0-9]+)\|([0-9]+)(?:@([0-9]+))?\|([0-9]+)\|([0-9]+)\|(.+)", rest, re.DOTALL
        )
        if not r or any(lua_int(x) is None for x in r.groups()[:5] if x is not None):
            return None
        out.update(gen=r.group(1), sched=int(r.group(2)), job=r.group(6))
    if "job" not in out or not utf8(out["job"]):
        return None
    return out


def parse_running(entry: bytes) -> dict[str, Any] | None:
    """include/tokens.lua's parse_running (None: does not parse)."""
    if len(entry) > 2048:
        return None
    m = re.fullmatch(
        rb"([0-9]+)\|([0-9]+)(?:@([0-9]+))?\|([0-9]+)\|([0-9]+)\|([0-9]+)\|(.+)", entry, re.DOTALL
    )
    if not m or any(lua_int(x) is None for x in m.groups()[:6] if x is not None):
        return None
    if not utf8(m.group(7)):
        return None
    return {"gen": m.group(1), "sched": int(m.group(2)), "job": m.group(7)}


def _at_least(lo: int | None):
    return lambda v: (n := lua_int(v)) is not None and (lo is None or n >= lo)


def _blank_or(rule):
    return lambda v: v == b"" or rule(v)


def _interval(v: bytes) -> bool:
    """include/interval.lua's interval_of: "<ms>" or "<p>/<q>" ms, 1 <= q <= 10^6, q <= p < 2^53."""
    m = re.fullmatch(rb"([0-9]+)(?:/([0-9]+))?", v)
    if not m or len(m.group(1)) > 16 or len(m.group(2) or b"") > 7:
        return False
    p, q = int(m.group(1)), int(m.group(2) or b"1")
    return 1 <= q <= 1_000_000 and q <= p < 2**53


def _one_of(*values: str):
    return lambda v: v in {x.encode() for x in values}


def _queued(v: bytes) -> bool:
    m = re.fullmatch(rb"([0-9]+)\|(-?[0-9]*)", v)
    return (
        bool(m)
        and lua_int(m.group(1)) is not None
        and (m.group(2) == b"" or lua_int(m.group(2)) is not None)
    )


def _interval(v: bytes) -> bool:
    """include/interval.lua's interval_of: "<ms>", or "<p>/<q>" (1 <= q <= 10^6, q <= p < 2^53)."""
    m = re.fullmatch(rb"([0-9]+)(?:/([0-9]+))?", v)
    if not m or len(m.group(1)) > 16 or len(m.group(2) or b"") > 7:
        return False
    p, q = int(m.group(1)), int(m.group(2) or b"1")
    return 1 <= q <= 1_000_000 and q <= p < 2**53


def _unreported(v: bytes) -> bool:
    m = re.fullmatch(rb"([0-9]+)\|([0-9]+)\|([0-9]+)\|[A-Za-z,\-]+", v)
    return m is not None and all(lua_int(m.group(i)) is not None for i in (1, 2, 3))


def _stash(v: bytes) -> bool:
    n = 0
    for m in re.finditer(rb"([0-9]+) ([^\n]+)\n", v):
        if lua_int(m.group(1)) is None:
            return False
        n += len(m.group(0))
    return n == len(v)


FLAG = (_one_of("", "0", "1"), "0, 1 or empty")
RULES = {
    "gen": (_at_least(0), "an integer >= 0"),
    "running": (_at_least(0), "an integer >= 0"),
    "retries": (_at_least(None), "an integer"),
    "k": (_at_least(0), "an integer >= 0"),
    "runs": (_at_least(0), "an integer >= 0"),
    "failures": (_at_least(0), "an integer >= 0"),
    "max_stalls": (_at_least(1), "an integer >= 1"),
    "interval": (_interval, 'whole ms >= 1 or "<p>/<q>" ms'),
    "grace": (_at_least(-1), "an integer >= -1"),
    "window": (_blank_or(_at_least(0)), "empty or >= 0"),
    "anchor": (_at_least(None), "an integer"),
    "next": (_at_least(None), "an integer"),
    "after": (_blank_or(_at_least(None)), "an integer or empty"),
    "since": (_blank_or(_at_least(None)), "an integer or empty"),
    "kind": (_one_of("after", "at", "every", "cron"), "after, at, every or cron"),
    "misfire": (_one_of("skip", "run_once", "catch_up"), "skip, run_once or catch_up"),
    "overlap": (_one_of("skip", "allow", "queue"), "skip, allow or queue"),
    "delivery": (_one_of("at_least_once", "at_most_once"), "at_least_once or at_most_once"),
    "state": (
        _one_of("", "succeeded", "failed", "abandoned", "cancelled"),
        "a final state or empty",
    ),
    "cancelled": FLAG,
    "paused": FLAG,
    "replan": FLAG,
    "go": FLAG,
    "lists": FLAG,
    "e": (lambda v: len(v) <= 16 and re.fullmatch(rb"[0-9a-fA-F]*", v) is not None, "hex or empty"),
    "lane": (lambda v: v != b"", "a lane name"),
    "def": (lambda v: v != b"" and utf8(v), "non-empty UTF-8 text"),
    "queued": (_blank_or(_queued), '"<ms>|<k>" or empty'),
    "sk": (_blank_or(_unreported), '"<ms>|<ms>|<count>|<reasons>" or empty'),
    "stash": (_blank_or(_stash), 'lines of "<ms> <due member>"'),
    "reruns": (_blank_or(_stash), 'lines of "<ms> <due member>"'),
}


def field_problem(name: str, v: bytes) -> str | None:
    limit = DEF_MAX if name in ("def", "stash", "reruns") else FIELD_MAX
    if len(v) > limit:
        return f"field {name} is over {limit} bytes"
    rule = RULES.get(name)
    if rule and not rule[0](v):
        return f"field {name} is not {rule[1]}"
    return None


ST_PROBLEM = records.ST_PROBLEM  # lua/include/st.lua's words


def job_problem(kind: str, h: Mapping[bytes, bytes], names: Iterable[str]) -> str | None:
    """check.lua's read_job: why a job key of TYPE ``kind`` holding ``h`` (its fields as
    stored: the small ones in ``st``) does not parse for a script that reads ``names``
    (None: it parses, or there is no job). Every read parses ``st`` first."""
    if kind not in ("hash", "none"):
        return f"malformed job data: the job key is a {kind}, not a hash"
    if b"st" in h and len(h[b"st"].split(b",")) != len(records.JOB_ST):
        return f"malformed job data: {ST_PROBLEM}"
    h = records.job_hash(h)
    names = list(names)
    for name in names:
        v = h.get(name.encode())
        if v is not None and (why := field_problem(name, v)):
            return f"malformed job data: {why}"
    f = {n: h.get(n.encode(), DEFAULTS.get(n.encode())) for n in names}
    if f.get("gen") is None:
        return None if b"def" not in h else "malformed job data: field gen is missing"
    need = ["def", "kind"]
    if f.get("e"):
        need.append("next")
    if f.get("kind") == b"every":
        need += ["anchor", "interval", "grace"]
    elif f.get("kind") == b"cron":
        need += ["grace", "next"]
    for name in need:
        if name in names and f.get(name) is None:
            return f"malformed job data: field {name} is missing"
    return None


def planted(h: Mapping[bytes, bytes], name: str, value: bytes | None) -> dict[bytes, bytes]:
    """Job hash ``h`` (as stored) with field ``name`` set to ``value`` (None: absent) where
    the scripts read it, as tests.helpers.write_job_field writes it: a small field inside
    ``st``."""
    out = dict(h)
    if name in records.JOB_ST and b"st" in h:
        values = h[b"st"].split(b",")
        values[records.JOB_ST.index(name)] = b"" if value is None else value
        out[b"st"] = b",".join(values)
    elif value is None:
        out.pop(name.encode(), None)
    else:
        out[name.encode()] = value
    return out


def lua_list(text: str, name: str) -> list[str]:
    """The field names of Lua table constant ``name`` (``local NAME = {'a', 'b'}``)."""
    m = re.search(rf"local {name} = \{{([^}}]*)\}}", text)
    assert m, name
    return re.findall(r"'([a-z_]+)'", m.group(1))


def read_lists(text: str) -> list[list[str]]:
    """The field lists of the ``read_job(job, {...})`` calls of a Lua text."""
    return [re.findall(r"'([a-z_]+)'", m) for m in re.findall(r"read_job\(job, \{([^}]*)\}", text)]


# ---- the diff, attributed -----------------------------------------------------------------


def entry_id(kind: str, raw: bytes) -> str:
    return f"{kind}:{hashlib.sha1(raw).hexdigest()[:16]}"


def _s(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


@dataclass
class Diff:
    """The changes of one call, per item (see the module docstring)."""

    effects: dict[str, Counter[str]] = field(default_factory=dict)
    events: list[dict[str, str]] = field(default_factory=list)  # new stream entries
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # new/changed records
    stats: Counter[str] = field(default_factory=Counter)  # counter deltas
    loose: list[str] = field(default_factory=list)  # changes no item explains

    def add(self, item: str, what: str) -> None:
        self.effects.setdefault(item, Counter())[what] += 1

    def of(self, item: str) -> set[str]:
        """The item's categories; one seen n > 1 times is spelled "<category>x<n>"."""
        got = self.effects.get(item, Counter())
        return {k if n == 1 else f"{k}x{n}" for k, n in got.items()}


# (done:<state>, dead-jobs and paused are listing indexes: derived, re-checked on every read;
# runs:<job> a recurring job's run history, derived, written with pcall; tasks the claimants'
# registry of the tasks they serve)
BOOKKEEPING = re.compile(
    r"^(fence|seq|gen|lanes|layout|epoch|ids|claimed:.*|replica:.*|done:.*|dead-jobs|paused"
    r"|runs:.*|tasks)$"
)


def diff(before: dict[str, tuple[str, Any]], after: dict[str, tuple[str, Any]]) -> Diff:
    """What changed between two dumps of a namespace, attributed per item."""
    import json

    d = Diff()
    running = {}
    for dump_ in (before, after):
        for token, entry in dump_.get("running", ("hash", {}))[1].items():
            running.setdefault(token, entry)

    def token_item(token: bytes) -> str:
        r = parse_running(running[token]) if token in running else None
        return _s(r["job"]) if r else entry_id("t", token)

    def member_item(member: bytes) -> str:
        m = parse_member(member)
        return _s(m["job"]) if m else entry_id("m", member)

    for key in sorted(before.keys() | after.keys()):
        b, a = before.get(key), after.get(key)
        if b == a:
            continue
        bv = b[1] if b else None
        av = a[1] if a else None
        family, _, name = key.partition(":")
        if key.startswith("due:"):
            bv, av = bv or {}, av or {}
            for m in bv.keys() - av.keys():
                d.add(member_item(m), "due-")
            for m in av.keys() - bv.keys():
                d.add(member_item(m), "due+")
            for m in bv.keys() & av.keys():
                if bv[m] != av[m]:
                    d.add(member_item(m), "due~")
        elif key in ("lease", "running"):
            bv, av = bv or {}, av or {}
            for t in bv.keys() - av.keys():
                d.add(token_item(t), f"{key}-")
            for t in av.keys() - bv.keys():
                d.add(token_item(t), f"{key}+")
            for t in bv.keys() & av.keys():
                if bv[t] != av[t]:
                    d.add(token_item(t), f"{key}~")
        elif key == "events":
            seen = {i for i, _ in (bv or [])}
            for i, fields in av or []:
                if i not in seen:
                    d.events += expand_entry({_s(k): _s(v) for k, v in fields.items()})
        elif key == "stats":
            bv, av = bv or {}, av or {}
            for k in (bv.keys() | av.keys()) - {b"live", b"live_since", "live", "live_since"}:
                delta = int(av.get(k, 0)) - int(bv.get(k, 0))
                if delta:
                    d.stats[_s(k)] += delta
        elif key == "quarantined":
            bv, av = bv or {}, av or {}
            for k in av:
                if bv.get(k) != av[k]:
                    d.records[_s(k)] = json.loads(av[k])
                    d.add(_s(k), "record")
            for k in bv.keys() - av.keys():
                d.loose.append(f"record {_s(k)} deleted")
        elif family == "job":
            d.add(name, "hash" if b and a else ("jobkey-" if b else "jobkey+"))
        elif family == "quarantined":
            d.add(name, "data+" if not b else "data~")
        elif family in ("dead", "skips", "bf"):
            d.add(name, family)
        elif not BOOKKEEPING.match(key):
            d.loose.append(f"{key}: {b!r} -> {a!r}")
    _attribute_events(d)
    return d


def expand_entry(f: dict[str, str]) -> list[dict[str, str]]:
    """One stream entry's events (a batch script's entry holds several), through the
    store's one parser (records.events), each as the fields of a single-event entry."""

    def ms(t: float | None) -> str:
        return "" if t is None else str(round(t * 1000))

    return [
        {
            "kind": e.kind,
            "job": e.job_id,
            "sched": ms(e.scheduled),
            "attempt": "" if e.attempt is None else str(e.attempt),
            "detail": e.detail,
            "at": ms(e.at),
        }
        for e in records.events(f)
    ]


def _attribute_events(d: Diff) -> None:
    """Events to items; a ``quarantined`` event to the new record it reports (its job and
    reason), so an entry that names no job (m:.., t:..) gets its event."""
    open_records = dict(d.records)
    for e in d.events:
        item = e["job"]
        if e["kind"] == "quarantined":
            for rid, rec in open_records.items():
                if rec["job"] == e["job"] and rec["reason"] == e["detail"]:
                    item = rid
                    del open_records[rid]
                    break
        d.add(item, f"ev:{e['kind']}")
