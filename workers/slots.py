"""One worker process of a process lane (workers/processes.py), driven by one worker
thread at a time: started with spawn, told each job over its pipe as JSON, watched until
it replies, dies, or the invocation's token is cancelled (a timeout, an interrupt, a lost
lease): then SIGTERM, SIGKILL after the lane's ``kill_grace``, and a fresh process.
Recycled between jobs after ``max_jobs`` jobs or past ``max_memory_mb``. With tracing on,
a job carries its invocation span's W3C context to the child (docs/tracing.md)."""

from __future__ import annotations

import atexit
import json
import logging
import signal
import time
import weakref
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

from scheduler.errors import InvocationCancelled, ProcessJobError, WorkerProcessError
from scheduler.lane import Lane
from scheduler.model import Target, TaskRef
from workers import child, traced
from workers.context import CURRENT, INTERRUPTED, InvocationContext, log_fields

log = logging.getLogger("duetime.workers")

PREPARE = 120.0  # seconds a worker waits for its process to start before a job, at most
_slots: weakref.WeakSet[Slot] = weakref.WeakSet()  # every slot of this process


@atexit.register  # before multiprocessing's own exit hook, which would wait for them
def _kill_left() -> None:
    """The interpreter exits: children still running a job (a shutdown that timed out;
    their leases were handed back) are killed, not waited for."""
    for slot in list(_slots):
        slot.kill()


class Slot:
    """One worker process of a lane, driven by one worker thread at a time."""

    def __init__(
        self,
        mp: Any,
        lane: str,
        spec: Lane,
        resolve: Callable[[Target], Any],
        owner: str,
        tracing: bool = False,
    ) -> None:
        """``tracing``: the engine traces (each job carries its invocation span's context,
        if one records: docs/tracing.md)."""
        self.lane = lane
        self._tracing = tracing
        self._mp, self._spec, self._resolve = mp, spec, resolve
        # the task modules this slot's jobs needed: a replacement child imports them as it
        # starts, before its next job (a fresh lane's first child imports on need)
        self._modules: set[str] = set()
        self._owner = owner
        self._proc: Any = None
        self._conn: Any = None
        self._jobs = 0
        self._ready = False  # the child said it is up (its preloads done)
        self._imported: set[str] = set()  # the task modules the child has imported
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
        self._ready, self._imported = False, set()

    def prepare(self, module: str | None) -> None:
        """Before a job's timeout starts: a child is up, and has imported ``module``
        (its start and the import are not the job's time). Gives up after PREPARE
        seconds, or if the child dies (then the job's own call starts another)."""
        if self._proc is None:
            self._restart()
        need = module is not None and module not in self._imported
        if module is not None:
            self._modules.add(module)
        if self._proc is None or (self._ready and not need):
            return
        if need:
            self._send({"import": module})
        proc, conn = self._proc, self._conn
        deadline = time.monotonic() + PREPARE
        while not self._ready or (need and module not in self._imported):
            ready = connection.wait([conn, proc.sentinel], max(0.0, deadline - time.monotonic()))
            if not ready:
                return
            try:
                message = json.loads(conn.recv_bytes()) if conn in ready else None
            except (EOFError, OSError):
                message = None
            if message is None:  # it died before any job: the run starts another
                proc.join()
                self._ended()
                return
            if message.get("t") == "ready":
                self._ready = True
                self._imported.update(message.get("modules") or ())
            elif message.get("t") == "imported":
                self._imported.add(str(message.get("module")))
            elif message.get("t") == "log":
                self._log(message, None, proc.pid)

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._conn.send_bytes(json.dumps(message).encode())
        except OSError:
            pass  # it died: its sentinel says so

    def run(self, target: TaskRef, module: str | None) -> Any:
        """Run ``target`` in this slot's child for the invocation running on this thread;
        its result, or raise what it ended as."""
        ctx = CURRENT.get()
        assert ctx is not None, "a slot runs jobs for the runner only"
        if self._proc is None:
            self.start_child()
        self._jobs += 1
        token = ctx.token
        token.on_cancel(self._wake)
        job = {"task": target.name, "args": target.args_json, "module": module, **_fields(ctx)}
        if self._tracing:  # the invocation's span, for the job's own spans in the child
            headers = traced.carrier()
            if headers is not None:
                job["trace"] = headers
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
                elif kind == "progress" and ctx.reports is not None:  # checked by the child
                    ctx.reports.report(ctx.claim, message.get("value"))
                elif kind in ("ok", "error") and stopping is None:
                    return message  # type: ignore[no-any-return]
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
                return self._after_death(proc, ctx, stopping, killed)

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
    ) -> dict[str, Any]:
        proc.join()
        code = proc.exitcode
        self._ended()
        self._restart()
        if stopping is None:
            return {
                "t": "died",
                "message": f"worker process {proc.pid} of lane {self.lane!r} died while it ran the "
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

    def kill(self) -> None:
        """SIGKILL the child if it still runs (the interpreter exits)."""
        proc = self._proc
        if proc is not None and proc.exitcode is None:
            proc.kill()

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

    def _log(self, message: dict[str, Any], ctx: InvocationContext | None, pid: int) -> None:
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
                **(self._fields(ctx, "job_log") if ctx is not None else {"lane": self.lane}),
            }
        )
        record.msecs = (record.created % 1) * 1000
        logger.handle(record)

    def _fields(self, ctx: InvocationContext, event: str) -> dict[str, Any]:
        return log_fields(ctx, event, self._owner)


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
