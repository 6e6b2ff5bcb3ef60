"""Process lanes: each worker thread of such a lane drives one worker process (a "slot")
that runs its jobs (workers/child.py). The replica keeps the claim, the lease heartbeat
and the commit: the thread runs ``Runner.run`` as in a thread lane, and the call of the
job is this module's ``Slot.run``, which sends the job to its child and waits for the
reply, the child's death, or the invocation's cancel token (a timeout, an interrupt, a
lost lease): then SIGTERM, SIGKILL after the lane's ``kill_grace``, and a fresh child.

Hooks, so a thread lane's per-job path is unchanged: the runner's resolver (``resolver``)
hands a process lane's thread a call of its slot instead of the task; each process lane's
pool runs ``run_in(lane, run)``, which binds the thread to a slot; ``on_exit`` closes the
slot of a worker thread that ends. The children start with spawn (a fresh interpreter:
safe beside the replica's threads; ~70-240 ms to a child ready to run, measured in
docs/performance.md) when the lanes are built, and after each stop, death or recycling.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import multiprocessing
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from multiprocessing import connection
from typing import Any

from scheduler.errors import InvocationCancelled, ProcessJobError, WorkerProcessError
from scheduler.model import Lane, Target, TaskRef
from workers import child
from workers.context import CURRENT, INTERRUPTED, InvocationContext
from workers.coroutines import close_loop

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
_slots: weakref.WeakSet[Slot] = weakref.WeakSet()  # every slot of this process


@atexit.register  # before multiprocessing's own exit hook, which would wait for them
def _kill_left() -> None:
    """The interpreter exits: children still running a job (a shutdown that timed out;
    their leases were handed back) are killed, not waited for."""
    for slot in list(_slots):
        proc = slot._proc
        if proc is not None and proc.exitcode is None:
            proc.kill()


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
    ) -> None:
        """``resolve``: the task registry's (a module-level function: each child imports
        it and resolves by name)."""
        self._resolve = resolve
        mp = start_context()
        self._lock = threading.Lock()
        self.lanes = frozenset(lanes)
        self._free: dict[str, list[Slot]] = {}
        self._slots: list[Slot] = []
        for lane, spec in lanes.items():
            slots = [Slot(mp, lane, spec, resolve, owner) for _ in range(spec.workers)]
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
        if not isinstance(target, TaskRef):
            raise TypeError(_CALLABLE.format(lane=slot.lane))
        module = getattr(getattr(fn, "func", fn), "__module__", None)  # imported on need
        return functools.partial(slot.run, target, module)

    def run_in(self, lane: str, run: Callable[[Any], None]) -> Callable[[Any], None]:
        """``run`` for a process lane's worker threads: each binds to a slot first."""

        def bound(item: Any) -> None:
            if _local.slot is None:
                with self._lock:
                    _local.slot = self._free[lane].pop()
            run(item)

        return bound

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


class Slot:
    """One worker process of a lane, driven by one worker thread at a time."""

    def __init__(
        self,
        mp: Any,
        lane: str,
        spec: Lane,
        resolve: Callable[[Target], Any],
        owner: str,
    ) -> None:
        self.lane = lane
        self._mp, self._spec, self._resolve = mp, spec, resolve
        # the task modules this slot's jobs needed: a replacement child imports them as it
        # starts, before its next job (a fresh lane's first child imports on need)
        self._modules: set[str] = set()
        self._owner = owner
        self._proc: Any = None
        self._conn: Any = None
        self._jobs = 0
        self._wake_r, self._wake_w = mp.Pipe(duplex=False)  # the token's cancel wakes us
        _slots.add(self)

    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.is_alive() else None

    def start_child(self) -> None:
        config = {
            "modules": sorted(self._modules),
            "log_level": logging.getLogger().getEffectiveLevel(),
        }
        ours, theirs = self._mp.Pipe()
        proc = self._mp.Process(
            target=child.main,
            args=(theirs, config, self._resolve),
            name=f"duetime-{self.lane}-process",
        )
        proc.start()
        theirs.close()
        self._proc, self._conn, self._jobs = proc, ours, 0

    def run(self, target: TaskRef, module: str | None) -> Any:
        """Run ``target`` in this slot's child for the invocation running on this thread;
        its result, or raise what it ended as."""
        ctx = CURRENT.get()
        assert ctx is not None, "a slot runs jobs for the runner only"
        if self._proc is None:
            self.start_child()
        self._jobs += 1
        if module:
            self._modules.add(module)
        token = ctx.token
        token.on_cancel(self._wake)
        job = {"task": target.name, "args": target.args_json, "module": module, **_fields(ctx)}
        try:
            self._conn.send_bytes(json.dumps({"run": job}).encode())
        except OSError:
            pass  # it died already: its sentinel says so below
        reply = self._await(ctx)
        if reply.get("t") == "ok":
            self._recycle_if_due(reply.get("rss"))
            return reply.get("result")
        if reply.get("t") == "error":
            self._recycle_if_due(reply.get("rss"))
            raise ProcessJobError(reply["type"], reply["message"], reply["trace"])
        raise WorkerProcessError(reply["message"])

    def _await(self, ctx: InvocationContext) -> dict[str, Any]:
        """The child's reply, or what became of it (``{"t": "died", "message"}``)."""
        proc, conn, token = self._proc, self._conn, ctx.token
        stopping: float | None = None
        killed = eof = False
        fatal: str | None = None
        while True:
            timeout = None
            if stopping is not None and not killed:
                timeout = max(0.0, stopping + self._spec.kill_grace - time.monotonic())
            ready = connection.wait(
                [proc.sentinel, self._wake_r, *([] if eof else [conn])], timeout
            )
            if self._wake_r in ready:
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
            if conn in ready:  # a message, or the end of the pipe
                try:
                    message = json.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    eof, message = True, {}
                kind = message.get("t")
                if kind == "log":
                    self._log(message, ctx, proc.pid)
                elif kind in ("ok", "error") and stopping is None:
                    return message  # type: ignore[no-any-return]
                elif kind == "fatal":
                    fatal = _fatal(message)
            if stopping is None and token.reason is not None:
                stopping = time.monotonic()
                self._stop(token.reason)
            elif (
                stopping is not None
                and not killed
                and time.monotonic() >= stopping + self._spec.kill_grace
            ):
                killed = True
                proc.kill()  # past its grace: SIGKILL
            if proc.sentinel in ready and (eof or not _readable(conn)):
                return self._after_death(proc, ctx, stopping, killed, fatal)

    def _wake(self) -> None:
        """The token was cancelled (from the cancelling thread): the slot's thread looks."""
        try:
            self._wake_w.send_bytes(b".")
        except (OSError, ValueError):  # the slot is closed: nothing runs there
            pass

    def _stop(self, reason: str) -> None:
        try:  # the reason first, for the child's cancel_reason; then SIGTERM
            self._conn.send_bytes(json.dumps({"stop": reason}).encode())
        except OSError:
            pass
        self._proc.terminate()

    def _after_death(
        self,
        proc: Any,
        ctx: InvocationContext,
        stopping: float | None,
        killed: bool,
        fatal: str | None,
    ) -> dict[str, Any]:
        proc.join()
        code = proc.exitcode
        self._ended()
        self._restart()
        if stopping is None:
            return {
                "t": "died",
                "message": fatal
                or f"worker process {proc.pid} of lane {self.lane!r} died while it ran the "
                f"job: {describe(code)}",
            }
        took = time.monotonic() - stopping
        how = (
            f"SIGKILLed {took:.2f}s after SIGTERM (past kill_grace={self._spec.kill_grace:g}s)"
            if killed
            else f"exited {took:.2f}s after SIGTERM"
        )
        reason = ctx.token.reason
        log.warning(
            "job %s invocation %s: worker process %d of lane %r stopped (%s): %s",
            ctx.job_id,
            ctx.invocation_id,
            proc.pid,
            self.lane,
            reason,
            how,
            extra=self._fields(ctx, "stopped"),
        )
        if reason == "timeout":
            return {"t": "ok", "result": None}  # the runner records it as timed out
        if reason == INTERRUPTED:
            raise InvocationCancelled(
                f"interrupted by cancel(interrupt=True); its worker process was stopped ({how})"
            )
        raise InvocationCancelled(f"its worker process was stopped ({reason}; {how})")

    def _recycle_if_due(self, rss: int | None) -> None:
        spec = self._spec
        why = None
        if spec.max_jobs is not None and self._jobs >= spec.max_jobs:
            why = f"after {self._jobs} jobs (max_jobs)"
        elif (
            spec.max_memory_mb is not None and rss is not None and rss > spec.max_memory_mb * 2**20
        ):
            why = f"at {rss / 2**20:.0f} MB resident (max_memory_mb={spec.max_memory_mb:g})"
        if why is not None:
            log.info("worker process %s of lane %r recycled %s", self.pid(), self.lane, why)
            self.close()
            self._restart()

    def _restart(self) -> None:
        try:
            self.start_child()
        except Exception as exc:  # fds or processes exhausted: the next job tries again
            self._proc = None
            log.error("lane %r: could not start a worker process (%s)", self.lane, exc)

    def close(self, *, final: bool = False) -> None:
        """End the child: its pipe closed, it exits; SIGKILL past the grace. ``final``:
        the slot is done for (its wake-up pipe goes too)."""
        proc = self._proc
        if final:
            self._wake_r.close()
            self._wake_w.close()
        if proc is None:
            return
        self._ended()
        proc.join(self._spec.kill_grace)
        if proc.exitcode is None:
            proc.kill()
            proc.join()

    def _ended(self) -> None:
        conn, self._conn, self._proc = self._conn, None, None
        if conn is not None:
            conn.close()

    def _log(self, message: dict[str, Any], ctx: InvocationContext, pid: int) -> None:
        """A record from the child, logged here with the job's fields."""
        level = int(message.get("level", logging.INFO))
        logger = logging.getLogger(str(message.get("name") or "root"))
        if not logger.isEnabledFor(level):
            return
        record = logging.makeLogRecord(
            {
                "name": logger.name,
                "levelno": level,
                "levelname": logging.getLevelName(level),
                "msg": str(message.get("msg", "")),
                "exc_text": message.get("exc"),
                "created": float(message.get("created") or time.time()),
                "process": pid,
                **_where(message.get("where")),
                **self._fields(ctx, "job_log"),
            }
        )
        record.msecs = (record.created % 1) * 1000
        logger.handle(record)

    def _fields(self, ctx: InvocationContext, event: str) -> dict[str, Any]:
        return {
            "event": event,
            "job_id": ctx.job_id,
            "invocation": ctx.invocation_id,
            "attempt": ctx.attempt,
            "lane": ctx.lane,
            "replica": self._owner,
        }


def _fields(ctx: InvocationContext) -> dict[str, Any]:
    return {
        "job_id": ctx.job_id,
        "scheduled_ms": ctx.scheduled_ms,
        "attempt": ctx.attempt,
        "fence": ctx.fence,
        "lane": ctx.lane,
    }


def _where(where: Any) -> dict[str, Any]:
    """A forwarded record's place in the child's code (path, line, function), if sent."""
    if isinstance(where, list) and len(where) == 3:
        path, line, func = where
        return {
            "pathname": str(path),
            "filename": str(path).rsplit("/", 1)[-1],
            "lineno": line,
            "funcName": func,
        }
    return {}


def _readable(conn: Any) -> bool:
    try:
        return bool(conn.poll())
    except (EOFError, OSError):
        return False


def _fatal(message: dict[str, Any]) -> str:
    return f"worker process could not start: {message.get('message')}"


def describe(exitcode: int | None) -> str:
    """How a child ended, for people: ``SIGKILL (signal 9)``, ``exit code 1``."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "signal"
        return f"{name} (signal {-exitcode})"
    return f"exit code {exitcode}"


# ---- the engine's hooks (scheduler/engine.py): each a line there -----------------------


def build(
    lanes: Mapping[str, Lane], owner: str, resolve: Callable[[Target], Any]
) -> ProcessLanes | None:
    """The process lanes of an engine, started; None if it has none."""
    return ProcessLanes(lanes, resolve, owner) if lanes else None


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
    if procs is not None and lane in procs.lanes and not isinstance(target, TaskRef):
        raise TypeError(_CALLABLE.format(lane=lane))


def close(procs: ProcessLanes | None) -> None:
    if procs is not None:
        procs.close()
