"""Every Redis key name of a namespace, in one place.

All keys of one shard share its hash tag, so each script touches one cluster slot: shard
0 (the whole namespace when it is not sharded) is ``duetime:{<ns>}:``, shard i of a
sharded namespace ``duetime:{<ns>#<i>}:`` (sharding/sharded.py). One ACL pattern covers a shard
(``~duetime:{ns}:*``); ``~duetime:{ns}:*`` plus ``~duetime:{ns#*}:*`` cover every shard.
"""

from __future__ import annotations

import re

_NS = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def namespace(ns: str) -> str:
    if not isinstance(ns, str) or not _NS.match(ns):
        raise ValueError(f"namespace must be 1-64 characters of A-Z a-z 0-9 _ . -, got {ns!r}")
    if ns in (".", ".."):  # the console's URLs: a browser reads it as a folder
        raise ValueError(f"namespace cannot be {ns!r}: a URL path would read it as a folder")
    return ns


def shard_tag(ns: str, shard: int = 0) -> str:
    """The hash tag of a shard: ``ns`` for shard 0, ``ns#<i>`` for shard i > 0."""
    if isinstance(shard, bool) or not isinstance(shard, int) or shard < 0:
        raise ValueError(f"shard must be an int >= 0, got {shard!r}")
    return namespace(ns) if shard == 0 else f"{namespace(ns)}#{shard}"


# stats fields that are not event kinds: the scripts' count of live jobs and when it began
LIVE_FIELDS = frozenset({"live", "live_since"})


class Keys:
    """The keys of shard ``shard`` of the ``count`` shards of namespace ``ns`` (shard 0
    of 1: the namespace's own, unsharded layout)."""

    def __init__(self, ns: str, shard: int = 0, count: int = 1) -> None:
        if not 0 <= shard < count:
            raise ValueError(f"shard {shard} is not one of {count} shard(s)")
        self.shard, self.count = shard, count
        self.prefix = f"duetime:{{{shard_tag(ns, shard)}}}:"
        p = self.prefix
        self.lanes = p + "lanes"  # set: lanes that ever had a job
        self.lease = p + "lease"  # zset: token -> lease deadline (epoch ms)
        self.running = p + "running"  # hash: token -> gen|sched[@ready]|attempt|stalls|fence|job
        self.events = p + "events"  # stream, capped at ~10,000
        # hash: counters per event kind, and the live-job count (LIVE_FIELDS, integrity/upkeep.py)
        self.stats = p + "stats"
        self.ids = p + "ids"  # counter: JobScheduler int ids
        self.wake = p + "wake"  # pub/sub channel: due ms of a new earliest job
        self.quarantine = p + "quarantine"  # list: malformed due members (before 0.2; legacy)
        self.quarantined = p + "quarantined"  # hash: entry id -> JSON record of what moved
        self.reconcile = p + "reconcile"  # string: the reconciler's SCAN cursor, shared
        self.metrics_leader = p + "metrics-leader"  # string, TTL: replica exporting gauges
        self.fence = p + "fence"  # counter: fencing numbers
        self.gen = p + "gen"  # counter: job definition generations
        self.seq = p + "seq"  # counter: FIFO order of due entries
        self.epoch = p + "epoch"  # random id set once: gone = Redis lost our data
        self.layout = p + "layout"  # data layout version of the scripts that wrote it
        self.shards = p + "shards"  # shard 0 only: the namespace's shard count, fixed
        self.paused = p + "paused"  # set: jobs paused (ls --state paused; may hold stale ids)
        self.dead_jobs = p + "dead-jobs"  # zset: job -> its last dead letter (ms), a day
        self.replicas = p + "replicas"  # hash: replica -> JSON (version, heartbeat), shard 0
        self.tasks = p + "tasks"  # hash: replica -> the tasks it serves (claim.lua's ARGV[6])
        self.parked = p + "parked"  # set: tasks whose jobs wait for a replica serving them
        # flow control (lua/include/flow.lua, limits.lua; docs/flow-control.md)
        self.limits = p + "limits"  # hash: scope -> "<rate> <period ms> <concurrency>"
        self.flow_running = p + "flow:run"  # hash: limit key -> invocations running
        self.flow_held = p + "flow:held"  # hash: token of a keyed invocation -> its queue
        # key rules (lua/rule.lua, include/keyrules.lua; scheduler/keyrules.py)
        self.key_rules = p + "keyrules"  # hash: "task:<name>" | "lane:<name>" -> key template
        self.rules_stamp = p + "keyrules:stamp"  # string: "<changes>.<ms>", bumped by each

    def due(self, lane: str) -> str:
        return f"{self.prefix}due:{lane}"  # zset: pending member -> due epoch ms

    def levels(self, lane: str) -> str:
        return f"{self.prefix}levels:{lane}"  # set: priorities of the lane's flow queues

    def turns(self, level: str) -> str:
        # zset: limit key -> its queue's next turn (ms); level: "<lane>\x1f<priority>"
        return f"{self.prefix}turns:{level}"

    def window(self, key: str) -> str:
        return f"{self.prefix}flow:win:{key}"  # list: a limit key's last starts (ms)

    def waiting(self, key: str) -> str:
        return f"{self.prefix}flow:wait:{key}"  # set: queues waiting for a slot of the key

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"  # hash: definition and state of one job

    def skips(self, job_id: str) -> str:
        return f"{self.prefix}skips:{job_id}"  # list: recent skipped ranges

    def runs(self, job_id: str) -> str:
        return f"{self.prefix}runs:{job_id}"  # list: a recurring job's recent runs

    def dead(self, job_id: str) -> str:
        return f"{self.prefix}dead:{job_id}"  # list: recent dead letters (JSON)

    def done(self, state: str) -> str:
        return f"{self.prefix}done:{state}"  # zset: job -> retired at (ms), for a day

    def backfilled(self, job_id: str) -> str:
        return f"{self.prefix}bf:{job_id}"  # zset: occurrences a backfill has queued

    def claimed(self, owner: str) -> str:
        return f"{self.prefix}claimed:{owner}"  # string, 60 s TTL: last claim request + reply

    def app(self, name: str) -> str:
        return f"{self.prefix}app:{name}"  # any type: an application's own data (the demo's)

    def quarantined_data(self, entry: str) -> str:
        return f"{self.prefix}quarantined:{entry}"  # any type: the raw data moved aside

    def minute(self, minute: int) -> str:
        return f"{self.prefix}minute:{minute}"  # hash, TTL a day: replica figures of a minute

    def parked_jobs(self, task: str) -> str:
        """``task`` as definitions spell it (``codec.task_token``)."""
        return f"{self.prefix}parked:{task}"  # zset: due members waiting for the task

    def replica(self, owner: str) -> str:
        return f"{self.prefix}replica:{owner}"  # string with TTL: a live replica
