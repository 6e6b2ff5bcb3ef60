"""Successes sent with the next claim, in one round trip (``AcksWithClaims``, base.py).

A replica records its successes in batches (workers/acks.py, complete_many.lua). When its
dispatcher claims while successes wait, both go in one non-transactional pipeline on one
connection: complete_many.lua, then claim.lua (``RedisStore.call_scripts``, one
``gateway.Trip``). Both route by the namespace's (shard's) key, so on a cluster
they reach the node of that slot together.

* **Acks first.** What they end (a RUNNING entry, a lease, a recurring job's ``running``
  count) is over before the claim judges capacity, overlap and the next due time, and
  the claim's reaper never meets a lease whose job already succeeded.
* **A lost reply.** redis-py reconnects and resends the whole pipeline
  (``urls.resend_policy``): complete_many answers ``ok`` again for an item it committed
  (counted once), and claim.lua answers a resend of its request id with its first reply
  (its resend record), so the claims returned are the ones it made, never a second batch.
* **NOSCRIPT.** A call answered NOSCRIPT did not run: its script is loaded and that call
  alone sent again. (So when only complete_many.lua was missing, after a restart or a
  ``SCRIPT FLUSH``, that one call records the acks after the claim: nothing is lost,
  the claim just did not see them.)
* **Errors.** An ack whose reply is lost or an error is ``None`` (the caller records it
  through its normal flush: a resend is safe); the claim's error is ``AckedClaim.error``,
  as ``claim_due`` would have raised it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from scheduler.model import Claim, ClaimBatch, Commit
from scheduler.stores.base import AckedClaim
from scheduler.stores.redis.integrity.server_checks import refused
from scheduler.stores.redis.protocol import records, script_args


class ClaimRequest(NamedTuple):
    """One claim.lua call: its arguments after the prefix and time, and what reading its
    reply needs."""

    argv: list[str]  # owner, request id, lease ms, tasks served, fences, lane/capacity pairs
    capacity: dict[str, int]
    owner: str
    sent: float  # monotonic time, just before sending (the clock offset of the reply)
    high: int  # the highest fence this store was handed before (lost-claim detection)
    lease: float | None = None  # as asked (argv holds it in ms)
    round: int = 0  # > 0: a claim that calendar plans asked for (RedisStore.claimed)
    prior: tuple[int, ...] = ()  # the fences the claim's earlier calls were handed


class Riding(Protocol):
    """What ``complete_and_claim`` needs of a store (RedisStore's methods)."""

    url: str

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]: ...

    def claim_due(
        self, capacity: Mapping[str, int], lease: float | None, owner: str
    ) -> ClaimBatch: ...

    def claim_request(
        self, capacity: Mapping[str, int], lease: float | None, owner: str
    ) -> ClaimRequest: ...

    def call_script(self, name: str, *args: Any) -> Any: ...

    def call_scripts(self, *calls: tuple[str, Sequence[Any]]) -> list[Any]: ...

    def claimed(self, text: str, request: ClaimRequest) -> ClaimBatch: ...


def ack_args(done: Sequence[tuple[Claim, Any]]) -> list[str]:
    """complete_many.lua's arguments for ``done`` (script_args.complete_many)."""
    return script_args.complete_many(
        (claim.job_id, claim.token, records.result_json(result)) for claim, result in done
    )


def complete_many(store: Riding, done: Sequence[tuple[Claim, Any]], max_acks: int) -> list[Commit]:
    """``RedisStore.complete_many``: one complete_many.lua call per ``max_acks`` items."""
    out: list[Commit] = []
    for i in range(0, len(done), max_acks):
        out += commits(store.call_script("complete_many", *ack_args(done[i : i + max_acks])))
    return out


CODES = {c.value: c for c in Commit}  # a dict lookup: ~10x cheaper than Commit(code)


def commits(codes: Sequence[str]) -> list[Commit]:
    """The ``Commit`` of each reply code (a dict lookup: ``Commit(code)`` costs ~0.3 µs
    per code, and a batch of acks has hundreds); an unknown code raises ValueError, as
    ``Commit(code)`` does."""
    return [CODES.get(code) or Commit(code) for code in codes]


def codes(reply: Any, n: int) -> list[Commit | None]:
    """complete_many.lua's reply as outcomes; ``None`` each if it is an error or not one
    known code per item."""
    if isinstance(reply, list) and len(reply) == n:
        try:
            return [CODES[code] for code in reply]
        except (KeyError, TypeError):
            pass
    return [None] * n


def complete_and_claim(
    store: Riding,
    done: Sequence[tuple[Claim, Any]],
    capacity: Mapping[str, int],
    lease: float | None,
    owner: str,
    max_acks: int,
) -> AckedClaim:
    """``store.complete_many(done)`` then ``store.claim_due(...)`` in one round trip (see
    the module docstring; at most ``max_acks`` ride, any before them go on their own);
    never raises."""
    acks: list[Commit | None] = []
    if len(done) > max_acks:  # more than one call takes: all but the last on their own
        try:
            acks += store.complete_many(done[:-max_acks])
        except Exception:
            acks += [None] * (len(done) - max_acks)
        done = done[-max_acks:]
    if not done:
        try:
            return AckedClaim(acks, store.claim_due(capacity, lease, owner), None)
        except Exception as exc:
            return AckedClaim(acks, None, exc)
    try:
        request = store.claim_request(capacity, lease, owner)
        ack_reply, claim_reply = store.call_scripts(
            ("complete_many", ack_args(done)), ("claim", request.argv)
        )
    except Exception as exc:  # unreachable (after redis-py's resends): outcomes unknown
        return AckedClaim(acks + [None] * len(done), None, exc)
    acks += codes(ack_reply, len(done))
    if isinstance(claim_reply, Exception):
        return AckedClaim(acks, None, refused(claim_reply, store.url))
    try:
        return AckedClaim(acks, store.claimed(claim_reply, request), None)
    except Exception as exc:
        return AckedClaim(acks, None, exc)
