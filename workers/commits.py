"""Recording an outcome in the store, shared by single commits (runner) and batched
acks (acks): the ``before_complete`` failpoint, then the write, retried a few times.

A store error is retried (a pooled connection that an outage left dead fails once, then
reconnects; a resent commit is idempotent by token). If it still fails, the write is
given up: the invocation's lease expires and it runs again (at-least-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from scheduler.model import Claim, Commit
from workers import failpoints

log = logging.getLogger("duetime.workers")

COMMIT_RETRY_PAUSES = (0.05, 0.25, 1.0)  # seconds between tries to record an outcome

T = TypeVar("T")


def refused(claim: Claim, result: Commit) -> None:
    """Log an outcome the store did not record as asked (``result`` is not OK)."""
    if result is Commit.QUARANTINED:
        log.error(
            "job %s invocation %s attempt %d: its data in the store does not parse; the "
            "store moved it aside (quarantined) with this outcome in its record",
            claim.job_id,
            claim.invocation_id,
            claim.attempt,
        )
        return
    if result is Commit.NOT_FOUND:
        log.info(
            "job %s was deleted while invocation %s ran; its outcome is dropped",
            claim.job_id,
            claim.invocation_id,
        )
        return
    log.warning(
        "stale commit rejected for job %s invocation %s attempt %d (%s)",
        claim.job_id,
        claim.invocation_id,
        claim.attempt,
        result.value,
    )


def record(what: str, write: Callable[[], T]) -> T | None:
    """``write()``'s result, or None once every retry failed (logged)."""
    failpoints.hit("before_complete")
    for pause in (*COMMIT_RETRY_PAUSES, None):
        try:
            return write()
        except Exception as exc:
            if getattr(exc, "logged", False):  # already reported, rate-limited (a corrupt key)
                return None
            if pause is None:
                log.error(
                    "recording the outcome of %s failed: %s; it will run again once "
                    "its lease expires",
                    what,
                    exc,
                )
                return None
            log.warning(
                "recording the outcome of %s failed (%s); retrying in %gs", what, exc, pause
            )
            time.sleep(pause)  # real seconds: a store blip, not scheduled time
    return None
