"""Process lanes: each worker thread of such a lane drives one worker process (a slot:
workers/slots.py) that runs its jobs (workers/child.py). The replica keeps the claim, the
lease heartbeat and the commit: the thread runs ``Runner.run`` as in a thread lane, and
the call of the job is ``Slot.run``, which sends the job to its process and waits for the
reply, the process's death, or the invocation's cancel token.

Hooks, so a thread lane's per-job path is unchanged: the runner's resolver (``resolver``)
hands a process lane's thread a call of its slot instead of the task; each process lane's
pool runs ``run_in(lane, run)``, which binds the thread to a slot and, before the job's
timeout starts, waits for its process to be up with the task's module imported;
``on_exit`` ends the process of a worker thread that ends. The processes start with
spawn (a fresh interpreter: safe beside the replica's threads) when the lanes are built,
and after each stop, death or recycling.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from scheduler.lane import Lane
from scheduler.model import Target, TaskRef
from workers.coroutines import close_loop
from workers.slots import Slot

log = logging.getLogger("duetime.workers")

START_METHOD = "spawn"
_CALLABLE = (
    "lane {lane!r} runs its jobs in worker processes: only a registered task (a name and "
    "JSON arguments) can cross to one, not a callable; register it with @task, or give the "
    "job a thread lane"
)


class _Local(threading.local):
    slot: Slot | None = None  # the slot of a process lane's worker thread (a class default:
    # a thread lane's read finds None without an AttributeError, ~0.05 us instead of ~0.4)


_local = _Local()


def start_context() -> Any:
    """multiprocessing's spawn context, or one clear error where the platform lacks it."""
    try:
        return multiprocessing.get_context(START_METHOD)
    except (ValueError, ImportError, AttributeError, NotImplementedError) as exc:
        raise RuntimeError(
            f"process lanes need multiprocessing's {START_METHOD!r} start method, which this "
            f"platform ({sys.platform}) does not offer ({exc}); use a thread lane (an int) instead"
        ) from None


class ProcessLanes:
    """The slots of every process lane of one engine."""

    def __init__(
        self,
        lanes: Mapping[str, Lane],
        resolve: Callable[[Target], Any],
        owner: str = "",
        tracing: bool = False,
    ) -> None:
        """``resolve``: the task registry's (a module-level function: each child imports
        it and resolves by name). ``tracing``: the engine traces its invocations (each
        job's span context goes to its child: docs/tracing.md)."""
        self._resolve = resolve
        mp = start_context()
        self._lock = threading.Lock()
        self.lanes = frozenset(lanes)
        self._free: dict[str, list[Slot]] = {}
        self._slots: list[Slot] = []
        for lane, spec in lanes.items():
            slots = [Slot(mp, lane, spec, resolve, owner, tracing) for _ in range(spec.workers)]
            self._free[lane] = list(slots)
            self._slots += slots
        for slot in self._slots:
            slot.start_child()

    def resolver(self, target: Target) -> Callable[[], Any]:
        """The runner's resolver: a thread lane gets the task's call; a process lane's
        thread gets its slot's call of the task (the parent resolves it first, so an
        unknown task or malformed arguments fail as in a thread lane)."""
        fn = self._resolve(target)
        slot = _local.slot
        if slot is None:
            return fn  # type: ignore[no-any-return]
        ref = task_ref(target)
        if ref is None:
            raise TypeError(_CALLABLE.format(lane=slot.lane))
        module = getattr(getattr(fn, "func", fn), "__module__", None)  # imported on need
        return functools.partial(slot.run, ref, module)

    def run_in(self, lane: str, run: Callable[[Any], None]) -> Callable[[Any], None]:
        """``run`` for a process lane's worker threads: each binds to a slot first."""

        def bound(item: Any) -> None:
            slot = _local.slot
            if slot is None:
                with self._lock:
                    slot = _local.slot = self._free[lane].pop()
            slot.prepare(self._module_of(item.claim.spec.target))
            run(item)  # the job's timeout starts here: its process is up, its module in

        return bound

    def _module_of(self, target: Target) -> str | None:
        """The module that defines a task (its process imports it before the job)."""
        try:
            fn = self._resolve(target)
        except Exception:  # noqa: BLE001 - the runner reports it, as in a thread lane
            return None
        return getattr(getattr(fn, "func", fn), "__module__", None)

    def on_exit(self) -> None:
        """A worker thread ends: its slot's child goes (a thread lane's: nothing)."""
        close_loop()
        slot = _local.slot
        if slot is not None:
            _local.slot = None
            slot.close(final=True)

    def close(self) -> None:
        """Stop the children of slots no thread holds (never used, or whose thread ended)."""
        with self._lock:
            idle = [s for slots in self._free.values() for s in slots]
            for slots in self._free.values():
                slots.clear()
        for slot in idle:
            slot.close(final=True)

    def pids(self) -> dict[str, list[int]]:
        """The live worker processes of each process lane."""
        out: dict[str, list[int]] = {}
        for slot in self._slots:
            pid = slot.pid()
            out.setdefault(slot.lane, [])
            if pid is not None:
                out[slot.lane].append(pid)
        return out


# ---- the engine's hooks (scheduler/engine.py): each a line there -----------------------


def build(
    lanes: Mapping[str, Lane],
    owner: str,
    resolve: Callable[[Target], Any],
    tracing: bool = False,
) -> ProcessLanes | None:
    """The process lanes of an engine, started; None if it has none."""
    return ProcessLanes(lanes, resolve, owner, tracing) if lanes else None


@contextlib.contextmanager
def closed_on_error(procs: ProcessLanes | None) -> Iterator[None]:
    """The rest of an engine's start: if it raises (bad input checked after the lanes
    started, a store that does not answer), the worker processes go with it."""
    try:
        yield
    except BaseException:
        if procs is not None:
            procs.close()
        raise


def resolver(procs: ProcessLanes | None, resolve: Callable[[Target], Any]) -> Any:
    """The runner's resolver: the registry's own when no lane runs processes."""
    return resolve if procs is None else procs.resolver


def lane_options(procs: ProcessLanes | None, run: Callable[[Any], None]) -> dict[str, Any]:
    """``Lanes``' options: each worker thread's exit hook (its event loop closed, if it
    ran async jobs; its worker process ended), and each process lane's ``run``."""
    if procs is None:
        return {"on_exit": close_loop}
    return {
        "on_exit": procs.on_exit,
        "runs": {lane: procs.run_in(lane, run) for lane in procs.lanes},
    }


def check(procs: ProcessLanes | None, lane: str, target: Target) -> None:
    """Refuse, at enqueue, a callable on a process lane (only a task's name and JSON
    arguments can cross to a worker process)."""
    if procs is not None and lane in procs.lanes and task_ref(target) is None:
        raise TypeError(_CALLABLE.format(lane=lane))


def task_ref(target: Target) -> TaskRef | None:
    """What a worker process is told to run: the task's name and JSON arguments; for a
    registered task given as its function (the facades' ``schedule(fn)``), its name
    (``@task`` marks the function with it) and no arguments. None for any other callable."""
    if isinstance(target, TaskRef):
        return target
    name = getattr(target, "__duetime_task__", None)
    return TaskRef(name, "{}") if isinstance(name, str) else None


def close(procs: ProcessLanes | None) -> None:
    if procs is not None:
        procs.close()
