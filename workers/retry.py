"""Retry decisions: exponential backoff with jitter, then dead-letter."""

from __future__ import annotations

import random

from scheduler.model import RetryPolicy


def retry_delay(policy: RetryPolicy, attempt: int, rng: random.Random) -> float | None:
    """Seconds to wait before attempt ``attempt + 1``, or ``None`` when ``attempt`` was the
    last one (the invocation is then recorded as failed and dead-lettered).

    delay = min(max_backoff, backoff * factor ** (attempt - 1)) * (1 ± jitter)"""
    if attempt >= policy.max_attempts:
        return None
    base = min(policy.max_backoff, policy.backoff * policy.factor ** (attempt - 1))
    return max(0.0, base * (1 + policy.jitter * (2 * rng.random() - 1)))
