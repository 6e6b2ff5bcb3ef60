"""The hand-off from the dispatcher to the workers: a claim on its way to a worker
(``Work``, built a batch at a time by ``works``), and how long it then waited and ran
(``Ran``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from scheduler.model import Claim


class Work(NamedTuple):
    """A claim on its way to a worker, stamped with the engine-clock time it was claimed."""

    claim: Claim
    claimed_at: float


def works(claims: Sequence[Claim], claimed_at: float) -> list[Work]:
    """``Work(claim, claimed_at)`` for each of a claimed batch (``tuple.__new__`` builds
    each record without the NamedTuple's Python-level ``__new__``: a frame less per claim)."""
    new = tuple.__new__
    return [new(Work, (claim, claimed_at)) for claim in claims]


class Ran(NamedTuple):
    """How long an invocation waited for its worker after the claim, and then ran."""

    waited: float
    took: float
