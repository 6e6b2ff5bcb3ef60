"""Run the full fault matrix and print docs/reliability.md's table (markdown).

    python -m tests.faults.figures                  # every case once
    python -m tests.faults.figures --repeat 3       # medians of 3 runs per case
    python -m tests.faults.figures --case F5 --case F8

Each row: the case, N, the fault count, invocations lost, extra executions by cause,
duplicate commits, stale commits rejected (replica logs) and fenced rejects (witness),
the case's time figure (recovery after owner death, time to resume after an outage,
lateness under skew...) and whether every invariant held. Needs redis-server.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.faults import scenarios as s
from tests.faults import scenarios_more as m

CASES: dict[str, tuple[Callable[..., s.Outcome], dict[str, Any], str]] = {
    "F1": (s.owner_kills, {"n": 500, "kills": 10, "replicas": 5}, "recovery_ms_max"),
    "F2": (s.owner_pause, {"at": "mid_run"}, "stale_commits_rejected"),
    "F2c": (s.owner_pause, {"at": "before_complete"}, "stale_commits_rejected"),
    "F3": (s.redis_restart, {"n": 200}, "resume_ms"),
    "F4": (m.redis_empty, {}, "detect_ms"),
    "F5": (s.redis_unreachable, {"seconds": 10.0, "how": "blackhole"}, "resume_ms"),
    "F5r": (s.redis_unreachable, {"seconds": 10.0, "how": "reset"}, "resume_ms"),
    "F5s": (s.redis_unreachable, {"seconds": 10.0, "how": "sigstop"}, "resume_ms"),
    "F6": (s.clock_skew, {"n": 200}, "lateness_ms_max"),
    "F7": (m.slow_network, {}, "throughput_at_delay_jobs_s"),
    "F8": (m.scale, {}, "drain_s"),
    "F10": (m.memory_pressure, {}, "evicted_keys"),
    "F10d": (m.full_drain, {"n": 5000, "spread": 5.0}, "drain_s"),
    "F11": (m.long_jobs, {}, "long_job_claims"),
    "F11r": (m.failing_renewals, {}, "stale_commits_rejected"),
    "F12": (m.script_flush, {}, "failed"),
    "F13": (s.sigterm, {}, "handed_back"),
}


def _med(xs: list[Any]) -> Any:
    nums = [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if len(nums) != len(xs) or not nums:
        return xs[0] if len(set(map(str, xs))) == 1 else "/".join(map(str, xs))
    med = statistics.median(nums)
    return round(med) if isinstance(med, float) and med > 10 else med


def row(case: str, outs: list[s.Outcome], figure: str) -> str:
    dup: Counter[str] = Counter()
    for o in outs:
        dup.update(o.report.duplicates)
    dups = ", ".join(f"{k} {v / len(outs):g}" for k, v in sorted(dup.items())) or "0"
    ok = "yes" if all(o.ok for o in outs) else "NO"
    return (
        f"| {case} {outs[0].case.split(' ', 1)[1]} | {outs[0].n} | {outs[0].faults} | "
        f"{_med([o.report.lost for o in outs])} | {dups} | "
        f"{_med([o.report.duplicate_commits for o in outs])} | "
        f"{_med([o.report.stale_commits_rejected for o in outs])} / "
        f"{_med([o.report.fenced_rejects for o in outs])} | "
        f"{figure} = {_med([o.figures.get(figure) for o in outs])} | {ok} | "
        f"`python -m tests.faults.figures --case {case}` |"
    )


HEADER = (
    "| case | N | faults | lost | extra executions by cause (per run) | dup. commits | "
    "stale commits rejected / fenced rejects | figure (median) | I1-I7 hold | "
    "reproduce |\n|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every outcome")
    args = ap.parse_args(argv)
    rows, failed = [], False
    t0 = time.monotonic()
    for case in args.case or list(CASES):
        fn, kw, figure = CASES[case]
        outs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix=f"faults-{case}-") as tmp:
                outs.append(fn(pathlib.Path(tmp), **kw))
            if args.verbose or not outs[-1].ok:
                print(outs[-1], file=sys.stderr, flush=True)
        failed |= not all(o.ok for o in outs)
        rows.append(row(case, outs, figure))
        print(rows[-1], file=sys.stderr, flush=True)
    print(HEADER)
    print("\n".join(rows))
    print(f"\n{args.repeat} run(s) per case, {time.monotonic() - t0:.0f} s in all.")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
