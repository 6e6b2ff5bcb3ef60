"""The interval of a fixed-rate job in a shared store: the hash field ``interval``.

Whole milliseconds are written as before (``"250"``); any other interval as the exact
fraction of a millisecond ``"<p>/<q>"`` (``every=1/3`` is ``"1000/3"``), with
``1 <= q <= 10^6`` and ``p < 2^53`` so that lua/include/grid.lua computes every due time
exactly in doubles. ``schedules.exact_interval`` decides the fraction for both stores.
"""

from __future__ import annotations

import math
from fractions import Fraction

from scheduler import schedules

EXACT = 2**53  # Lua numbers are doubles: every integer below it is exact


def encode(seconds: float) -> str:
    """The ``interval`` field for an interval of ``seconds`` (>= 1 ms, checked by the
    caller). A fraction whose numerator would reach 2^53 (an interval of more than
    ~104 days with a fractional millisecond) is rounded up to the whole ms."""
    ms = schedules.exact_interval(seconds) * 1000
    if ms.denominator == 1 or ms.numerator >= EXACT:
        return str(math.ceil(ms))
    return f"{ms.numerator}/{ms.denominator}"


def decode(text: str) -> Fraction:
    """The ``interval`` field as milliseconds (``"250"`` or ``"<p>/<q>"``)."""
    p, _, q = text.partition("/")
    return Fraction(int(p), int(q or 1))


def is_fractional(text: str) -> bool:
    return "/" in text
