"""``python -m tests.faults.skewed OFFSET_SECONDS run ...``: a replica whose wall clock
(time.time) is OFFSET seconds off. Shared mode must not care: Redis TIME decides."""

from __future__ import annotations

import sys
import time

offset = float(sys.argv.pop(1))
_real_time = time.time
time.time = lambda: _real_time() + offset  # type: ignore[assignment]
time.time_ns = lambda: int((_real_time() + offset) * 1e9)  # type: ignore[assignment]

from scheduler.cli import main  # noqa: E402  (after the clock is skewed)

main()
