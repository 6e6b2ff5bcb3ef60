"""claim.lua's reply, parsed (the one parser of its format), and its claims built straight
from it: ``Claim`` records whose specs come from a cache keyed by the definition text, so
a burst of jobs that share a definition decodes it once."""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from scheduler.flow import RATE_START_WITHIN
from scheduler.model import Claim, JobSpec
from scheduler.stores.redis.protocol import definitions

SPEC_CACHE = 10_000  # distinct definitions kept decoded


def with_id(template: JobSpec, job_id: str) -> JobSpec:
    """``template`` (a decoded definition) as the spec of job ``job_id``: a copy of its
    fields, without re-running decoding or ``dataclasses.replace`` (a burst of claims of
    jobs that share one definition decodes it once)."""
    if template.job_id == job_id:
        return template
    spec = object.__new__(JobSpec)
    fields = spec.__dict__
    fields.update(template.__dict__)
    fields["job_id"] = job_id
    return spec


# One claim of claim.lua's reply, as sent: job id, scheduled ms, attempt, fence,
# generation, ready ms (when it became claimable), definition text.
RawClaim = tuple[str, int, int, int, int, int, str]


class ClaimReply(NamedTuple):
    """claim.lua's reply (times in epoch ms): see lua/claim.lua's header."""

    now: int
    next: int  # -1: nothing pending
    fence: int  # the fence counter before the call
    lease_until: int  # -1: no lease
    epoch: str
    claims: list[RawClaim]
    plans: list[str]  # calendar jobs whose occurrences the caller computes
    now_us: int = 0  # microseconds past ``now`` (0 from a script older than this field)
    plan_at: tuple[int, ...] = ()  # per plan, the claims before it: its place among them
    rated: frozenset[int] = frozenset()  # fences of claims a rate limit counted


def claim_reply(text: str) -> ClaimReply:
    """Parse claim.lua's reply (the one parser of it): the flat form (``<request id>\n``,
    a header line, then length-prefixed claims and plans), or the JSON form an earlier
    version kept as its resend record. Lengths are in bytes, so a reply with non-ASCII
    text is read as UTF-8 bytes. Raises ValueError if it does not parse."""
    _req, _, rest = text.partition("\n")
    if rest.startswith("{"):
        return _json_claim_reply(rest)
    if rest.isascii():
        return _flat_claim_reply(rest, "\n", str)
    return _flat_claim_reply(rest.encode(), b"\n", lambda b: b.decode())


def _flat_claim_reply(data: Any, nl: Any, text: Callable[[Any], str]) -> ClaimReply:
    end = data.index(nl)
    now, nxt, fence, lease_until, n, n_plans, n_epoch, *rest = map(int, data[:end].split())
    pos = end + 1 + n_epoch
    epoch = text(data[end + 1 : pos])
    claims: list[RawClaim] = []
    for _ in range(n):
        end = data.index(nl, pos)
        sched, attempt, f, gen, ready, jl, dl = map(int, data[pos:end].split())
        pos = end + 1 + jl
        claims.append(
            (text(data[end + 1 : pos]), sched, attempt, f, gen, ready, text(data[pos : pos + dl]))
        )
        pos += dl
    plans, at = [], []
    for _ in range(n_plans):
        end = data.index(nl, pos)
        length, *before = map(int, data[pos:end].split())  # "<at>": since issue 31
        pos = end + 1 + length
        plans.append(text(data[end + 1 : pos]))
        at.append(before[0] if before else n)
    if pos != len(data):
        raise ValueError(f"claim reply: {len(data) - pos} bytes left over")
    us = rest[0] if rest else 0
    rated = frozenset(rest[1:])
    return ClaimReply(now, nxt, fence, lease_until, epoch, claims, plans, us, tuple(at), rated)


def _json_claim_reply(text: str) -> ClaimReply:
    d = json.loads(text)
    cs = d["claims"] or []  # cjson encodes an empty list as {}
    return ClaimReply(
        d["now"],
        d["next"],
        d.get("fence", 0),
        cs[0]["l"] if cs else -1,
        d.get("epoch", ""),
        [(c["j"], c["s"], c["a"], c["f"], int(c["g"]), c.get("r", c["s"]), c["def"]) for c in cs],
        list(d.get("plan") or []),
    )


class Definitions:
    """Decoded definitions, keyed by their text (not the job id: every job of a burst has
    its own id, and many share a definition); at most ``SPEC_CACHE``, oldest out first."""

    def __init__(self) -> None:
        self._specs: OrderedDict[str, JobSpec] = OrderedDict()

    def spec(self, job_id: str, text: str) -> JobSpec:
        """The ``JobSpec`` of definition ``text`` for job ``job_id``; raises ValueError,
        KeyError or TypeError (definitions.decode) for a definition that does not parse."""
        template = self._specs.get(text)
        if template is None:
            template = self._specs[text] = definitions.decode(text, job_id)
            if len(self._specs) > SPEC_CACHE:
                self._specs.popitem(last=False)
        return with_id(template, job_id)


def build(
    reply: ClaimReply, owner: str, spec_of: Callable[[str, str], JobSpec]
) -> tuple[list[Claim], list[tuple[str, str, Exception]]]:
    """The reply's claims, as ``Claim`` records (the token of each is ``<owner>:<fence>``);
    and (job id, token, error) of each whose definition did not decode (``spec_of``
    raised ValueError, KeyError or TypeError), which the caller moves aside."""
    until = None if reply.lease_until < 0 else reply.lease_until / 1000
    rated = reply.rated
    claims = []
    bad: list[tuple[str, str, Exception]] = []
    for job, sched, attempt, fence, gen, ready, text in reply.claims:
        token = f"{owner}:{fence}"
        try:
            spec = spec_of(job, text)
        except definitions.UNREADABLE as exc:  # malformed data in Redis
            bad.append((job, token, exc))
            continue
        lane = spec.lane
        within = RATE_START_WITHIN if rated and fence in rated else None
        fields = (
            job,
            sched / 1000,
            attempt,
            token,
            fence,
            until,
            spec,
            gen,
            lane,
            ready / 1000,
            within,
        )
        claims.append(_new_claim(Claim, fields))
    return claims, bad


# ``tuple.__new__`` builds the record without the NamedTuple's Python-level ``__new__``
# (a frame less per claim, ~0.3 µs); ``fields`` above are all of Claim's, in order
_new_claim = tuple.__new__


def took_a_full_batch(claims: Sequence[Claim], lanes: Sequence[str], cap: int) -> bool:
    """Whether one of ``lanes`` got ``cap`` claims (a full batch: it may have more due);
    one pass over the claims' lanes."""
    if len(claims) < cap:
        return False
    taken = Counter(c.lane for c in claims)
    return any(taken[lane] >= cap for lane in lanes)
