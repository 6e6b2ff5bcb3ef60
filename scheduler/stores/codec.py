"""Job definitions as canonical JSON (the ``def`` field of a job hash), and back.

JSON only: a shared store holds registered task names with JSON arguments, never code.
Two equal definitions encode to the same text, which is how an upsert recognises them.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from scheduler import tasks
from scheduler.errors import TaskNotRegisteredError
from scheduler.model import (
    After,
    At,
    Delivery,
    Every,
    JobSpec,
    Misfire,
    Overlap,
    RetryPolicy,
    Schedule,
    TaskRef,
)


def task_ref(target: Any) -> TaskRef:
    """The TaskRef a shared store can hold for ``target``, or a clear error."""
    if isinstance(target, TaskRef):
        return target
    name = tasks.name_of(target) if callable(target) else None
    if name is None:
        raise TaskNotRegisteredError(
            f"{target!r} cannot be stored in a shared store: jobs there are registered tasks "
            "referenced by name (lambdas, closures and unregistered functions cannot be sent "
            "to other processes). Define a module-level function, decorate it with "
            "@scheduler.task('name'), and import its module in every replica (--import)")
    return TaskRef(name, "{}")


def _schedule(s: Schedule) -> dict[str, Any]:
    if isinstance(s, After):
        return {"kind": "after", "delay": s.delay}
    if isinstance(s, At):
        return {"kind": "at", "at": s.wall}
    return {"kind": "every", "interval": s.interval, "anchor": s.anchor}


def encode(spec: JobSpec) -> str:
    ref = task_ref(spec.target)
    return json.dumps({
        "id": spec.job_id, "task": ref.name, "args": ref.args_json,
        "schedule": _schedule(spec.schedule), "lane": spec.lane, "timeout": spec.timeout,
        "retry": asdict(spec.retry), "misfire": spec.misfire.value,
        "grace": spec.misfire_grace, "overlap": spec.overlap.value,
        "delivery": spec.delivery.value,
    }, sort_keys=True, separators=(",", ":"))


def decode(text: str) -> JobSpec:
    d = json.loads(text)
    s = d["schedule"]
    schedule: Schedule
    if s["kind"] == "after":
        schedule = After(s["delay"])
    elif s["kind"] == "at":
        schedule = At(s["at"])
    else:
        schedule = Every(s["interval"], s["anchor"])
    return JobSpec(
        job_id=d["id"], target=TaskRef(d["task"], d["args"]), schedule=schedule,
        lane=d["lane"], timeout=d["timeout"], retry=RetryPolicy(**d["retry"]),
        misfire=Misfire(d["misfire"]), misfire_grace=d["grace"], overlap=Overlap(d["overlap"]),
        delivery=Delivery(d["delivery"]))


def result_json(value: Any) -> str:
    """A job's return value as JSON text (its repr, as a JSON string, if not JSON)."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(repr(value))
