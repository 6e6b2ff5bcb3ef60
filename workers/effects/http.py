"""An HTTP call's idempotency headers: the invocation id as ``Idempotency-Key`` and the
fence as ``Idempotency-Fence``.

Guarantee: the key is the same for every attempt and every re-run of one occurrence of a
job (``<job_id>@<scheduled_ms>``), and differs between occurrences; the fence grows with
every claim of the occurrence. Exactly-once is then the receiver's part, which this
helper cannot enforce: it must store each key it has seen with its first response and
answer a repeat with that response without acting again; one that also keeps the highest
fence per key can refuse a request whose fence is lower (409) as from a stale owner.
docs/effects.md states the contract in full.
"""

from __future__ import annotations

from urllib.parse import quote

from workers.effects import Invocation, fence_of

__all__ = ["FENCE_HEADER", "KEY_HEADER", "idempotency_headers"]

KEY_HEADER = "Idempotency-Key"
FENCE_HEADER = "Idempotency-Fence"

# Visible ASCII kept as is, but for '%' (the escape itself), '"' and '\' (the quoting of
# a structured field), so a key is a valid header value and reads back with unquote().
_KEEP = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '%"\\')


def idempotency_headers(
    invocation: Invocation | None = None, *, fence: bool = True, structured: bool = False
) -> dict[str, str]:
    """``{"Idempotency-Key": <invocation id>, "Idempotency-Fence": <fence>}`` for the
    running invocation (or ``invocation``), to merge into a request's headers (httpx,
    requests, urllib all take a dict).

    The key is the invocation id percent-encoded (UTF-8) to visible ASCII, so any job id
    makes a valid header; a plain id reads as itself (``report@1767225600000``).
    ``structured=True`` sends it as a quoted string, the form of the IETF draft
    (``"report@1767225600000"``); ``fence=False`` leaves the fence header out.
    Outside a job, without ``invocation``: ``RuntimeError``."""
    f = fence_of(invocation, "idempotency_headers()")
    key = quote(f.invocation_id, safe=_KEEP)
    headers = {KEY_HEADER: f'"{key}"' if structured else key}
    if fence:
        headers[FENCE_HEADER] = str(f.fence)
    return headers
