"""F14: a seeded random nemesis soak (not part of CI).

    python -m tests.faults.soak --seed 1 --minutes 5

Five replicas behind the fault proxy run a steady stream of one-off jobs and a few
fixed-rate jobs while a nemesis, driven by ``random.Random(seed)``, injects a random mix
of F1 (SIGKILL an owner), F2 (SIGSTOP a replica past the lease), F5 (blackhole or reset
Redis for 1-5 s) and F7 (reply delays). Then the load stops, everything heals and
drains, and I1-I7 are checked on the whole history; every duplicate must be attributable
to a logged fault. Exit status 0 when every invariant held. The same seed replays the
same fault plan (timings still vary with the machine).
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import tempfile
import threading
import time

from tests.faults.harness import Harness, now_ms
from tests.faults.scenarios import _kill_an_owner, _up


def nemesis(h: Harness, rng: random.Random, stop: threading.Event, log: list[str]) -> None:
    assert h.proxy is not None
    while not stop.wait(1.0 + rng.random() * 3.0):
        fault = rng.choice(["kill", "kill", "pause", "outage", "delay"])
        if fault == "kill":
            if _kill_an_owner(h, rng):
                log.append(f"{now_ms():.0f} kill")
        elif fault == "pause":
            i = rng.randrange(len(h.fleet.procs))
            if h.fleet.procs[i].poll() is None:
                h.pause(i, h.lease * (1.5 + rng.random() * 1.5))
                log.append(f"{now_ms():.0f} pause replica {i}")
        elif fault == "outage":
            how = rng.choice(["blackhole", "reset"])
            seconds = 1.0 + rng.random() * 4.0
            h.outage(seconds, how)
            log.append(f"{now_ms():.0f} outage {how} {seconds:.1f}s")
        else:
            ms = rng.choice([50, 100, 200])
            h.proxy.delay(ms, ms / 2)
            stop.wait(2.0 + rng.random() * 3.0)
            h.proxy.delay(0)
            log.append(f"{now_ms():.0f} delay {ms}ms")


def run(seed: int, minutes: float, tmp: pathlib.Path) -> int:
    rng = random.Random(seed)
    with Harness(tmp, replicas=5, workers=4, lease=2.0, resync=0.5, proxy=True, seed=seed) as h:
        _up(h)
        for i in range(5):
            h.every(f"soak-rec{i}", 1.0)
        stop = threading.Event()
        faults: list[str] = []
        t = threading.Thread(target=nemesis, args=(h, rng, stop, faults), daemon=True)
        t.start()
        end = time.monotonic() + minutes * 60
        n = 0
        while time.monotonic() < end:
            k = rng.randint(5, 40)
            h.enqueue_many(k, seconds=rng.choice([0.0, 0.1, 0.5, 1.5]), spread=2.0)
            n += k
            time.sleep(1.0)  # the load's pace
        stop.set()
        t.join()
        assert h.proxy is not None
        h.proxy.heal()
        for i, p in enumerate(h.fleet.procs):  # bring back any replica a kill left down
            if p.poll() is not None:
                h.fleet.restart(i)
        finished = h.wait_done(n, 120)
        for i in range(5):
            h.client.cancel(f"soak-rec{i}")
    rep = h.check()
    print(
        f"seed {seed}, {minutes:g} min, {n} one-off jobs, {len(faults)} faults, drained: {finished}"
    )
    print("\n".join(faults))
    print(rep.summary())
    return 0 if rep.ok and finished else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="F14: seeded random fault soak")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=5.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="duetime-soak-") as tmp:
        return run(args.seed, args.minutes, pathlib.Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
