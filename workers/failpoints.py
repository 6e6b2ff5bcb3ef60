"""Deterministic failpoints for fault tests, switched on by ``$DUETIME_FAILPOINTS``.

``DUETIME_FAILPOINTS="after_claim=crash:3,before_complete=stop,renew=fail:2-3"`` means: the
3rd time a claim is handed to a worker the process dies (SIGKILL, no clean-up); every
time a completion is about to be recorded the process SIGSTOPs itself; the 2nd and 3rd
lease renewals raise ``FailpointError``.

Points (where the replica calls ``hit``): ``after_claim`` (a claim was handed to a worker),
``after_effect`` (the job's function returned, nothing recorded yet), ``before_complete``
(the outcome is about to be written), ``renew`` (a lease renewal is about to be sent).

Actions: ``crash`` (SIGKILL this process), ``stop`` (SIGSTOP this process; a test sends
SIGCONT), ``hang`` (block the calling thread forever), ``fail`` (raise ``FailpointError``).
``ACTION`` fires on every hit, ``ACTION:N`` on the Nth only, ``ACTION:N-M`` on hits N..M.
Each firing is written to stderr first (point, action, hit, pid, wall ms), so a test
can see it in the replica's log.

Guarantee: with the variable unset (production), ``hit`` is one truthiness test of an
empty dict and does nothing else. A malformed value raises ``ValueError`` at import:
a fault test must never run with its fault silently off.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

ENV_VAR = "DUETIME_FAILPOINTS"
POINTS = ("after_claim", "after_effect", "before_complete", "renew")
ACTIONS = ("crash", "stop", "hang", "fail")


class FailpointError(RuntimeError):
    """Raised by a ``fail`` failpoint (an injected fault, never a real one)."""


class _Point:
    __slots__ = ("action", "first", "last", "hits")

    def __init__(self, action: str, first: int, last: int | None) -> None:
        self.action, self.first, self.last, self.hits = action, first, last, 0


def parse(text: str) -> dict[str, _Point]:
    """``name=action[:N[-M]],...`` into points; raises ``ValueError`` on anything else."""
    points: dict[str, _Point] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, spec = item.partition("=")
        action, _, when = spec.partition(":")
        if not sep or name not in POINTS or action not in ACTIONS:
            raise ValueError(
                f"${ENV_VAR}: bad item {item!r}; expected POINT=ACTION[:N[-M]] "
                f"with POINT in {POINTS} and ACTION in {ACTIONS}"
            )
        first, last = 1, None
        if when:
            lo, dash, hi = when.partition("-")
            if not lo.isdigit() or (dash and not hi.isdigit()):
                raise ValueError(f"${ENV_VAR}: bad hit range {when!r} in {item!r}")
            first = int(lo)
            last = int(hi) if dash else first
        points[name] = _Point(action, first, last)
    return points


_points = parse(os.environ.get(ENV_VAR, ""))
_lock = threading.Lock()


def hit(name: str) -> None:
    """Count a pass through failpoint ``name`` and fire its action if it is due."""
    if _points:
        _fire(name)


def _fire(name: str) -> None:
    point = _points.get(name)
    if point is None:
        return
    with _lock:
        point.hits += 1
        n = point.hits
    if n < point.first or (point.last is not None and n > point.last):
        return
    sys.stderr.write(
        f"FAILPOINT {name}={point.action} hit {n} pid {os.getpid()} at {time.time() * 1000:.0f}\n"
    )
    sys.stderr.flush()
    if point.action == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif point.action == "hang":
        threading.Event().wait()
    else:
        raise FailpointError(f"failpoint {name} (hit {n})")
