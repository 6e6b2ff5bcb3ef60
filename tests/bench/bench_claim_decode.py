"""The replica's cost of turning one claim.lua reply of 100 claims into ``Claim`` records,
per claim: this checkout (the flat reply, ``claims.build``, definitions cached by their
text) against git revision REV (its JSON reply: ``json.loads``, then ``definitions.decode`` and
``definitions.claim`` per record, its cache keyed by job id and text, so a burst never hits).

    PYTHONPATH=. python tests/bench/bench_claim_decode.py --against cb42fce

Two kinds of burst: every job with its own arguments (each definition seen once, as in
``probe_shared_burst.py``) and every job with the same definition. Prints the best of 5
repeats of 200 replies (the least disturbed by a shared box), µs per claim.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scheduler.model import At, JobSpec, TaskRef  # noqa: E402
from scheduler.stores.redis.claiming import claim_reply as cc  # noqa: E402
from scheduler.stores.redis.protocol import definitions  # noqa: E402

N = 100


def old_codec(rev: str) -> Any:
    """The job definitions' codec of git revision ``rev`` (protocol/definitions.py, or
    codec.py before the Redis wing was grouped), loaded beside this checkout's modules."""
    for where in ("protocol/definitions.py", "codec.py"):
        shown = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:scheduler/stores/redis/{where}"],
            capture_output=True,
            text=True,
        )
        if shown.returncode == 0:
            break
    shown.check_returncode()
    text = shown.stdout
    path = pathlib.Path(tempfile.mkdtemp(prefix="duetime-bench-")) / "old_codec.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_codec", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def replies(defs: list[str]) -> tuple[str, str]:
    """The same claims as this checkout's flat reply and as the JSON reply before it."""
    parts = [f"req\n1764550000000 -1 5 1764550030000 {len(defs)} 0 0\n"]
    for i, d in enumerate(defs):
        job = f"job-{i:06d}"
        parts.append(f"1764550000000 1 {i + 6} 17 1764550000000 {len(job)} {len(d)}\n{job}{d}")
    claims = [
        {
            "j": f"job-{i:06d}",
            "s": 1764550000000,
            "a": 1,
            "t": f"o:{i + 6}",
            "f": i + 6,
            "l": 1764550030000,
            "g": "17",
            "def": d,
            "r": 1764550000000,
        }
        for i, d in enumerate(defs)
    ]
    return "".join(parts), json.dumps({"now": 1, "next": -1, "fence": 5, "claims": claims})


def best(fn: Callable[[], Any]) -> float:
    """µs per claim: the best of 5 repeats of 200 replies."""
    return min(timeit.repeat(fn, number=200, repeat=5)) / 200 / N * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", required=True, help="a git revision with the JSON reply")
    old = old_codec(ap.parse_args().against)
    kinds: dict[str, Callable[[int], str]] = {
        "each job its own arguments": lambda i: json.dumps({"due_ms": 1, "tag": f"P{i}"}),
        "one shared definition": lambda i: "{}",
    }
    for label, args in kinds.items():
        defs = [
            definitions.encode(JobSpec(f"j{i}", TaskRef("bench.noop", args(i)), At(1764550000.0)))
            for i in range(N)
        ]
        flat, js = replies(defs)
        shared = cc.Definitions()
        each = label.startswith("each")  # every definition seen once, as in a burst

        def new() -> object:
            definitions = cc.Definitions() if each else shared
            return cc.build(cc.claim_reply(flat), "o", definitions.spec)

        def before() -> object:
            specs: dict[tuple[str, str], JobSpec] = {}
            out = []
            for c in json.loads(js)["claims"]:
                key = (c["j"], c["def"])
                spec = specs.get(key) or old.decode(c["def"], c["j"])
                specs[key] = spec
                out.append(old.claim(c, spec))
            return out

        print(f"{label}: before {best(before):.1f} µs/claim, now {best(new):.1f} µs/claim")


if __name__ == "__main__":
    main()
