"""A process lane's worker process: runs one job at a time for the worker thread that
started it (workers/processes.py), and nothing else: no store, no lease, no commit.

It says it is up (after importing the task modules its predecessor needed), then serves
messages over its pipe, each one JSON
(never pickled): a job (task name, JSON arguments, the invocation's job id, scheduled
time, attempt, fence and lane) in; the job's log records while it runs, then its JSON
result or its error (type, message, traceback text) and the process's resident memory,
out. ``current_invocation()`` works in the job (sync or ``async def``). A job sent with its
invocation span's W3C context (tracing on) runs with that context current, if the
OpenTelemetry API is installed here: the spans it creates are the invocation's children
(this process's SDK, if any, exports them: docs/tracing.md).

Stopping: SIGTERM (a timeout, an interrupt, a lost lease) cancels the invocation's token
(``cancelled()`` turns true, ``cancel_reason`` says why) and raises ``WorkerStopped``
(a ``SystemExit``) in the job, so its ``finally`` blocks and ``with`` exits run; the
process then exits. The parent SIGKILLs it if it has not exited within the lane's
``kill_grace``. SIGINT is ignored (a Ctrl-C reaches the replica, which stops cleanly). A
parent that dies takes its children with it (they watch its sentinel).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import multiprocessing
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from scheduler import validation
from scheduler.model import Target, TaskRef
from workers import coroutines, failures, traced
from workers.context import CURRENT, CancelToken, InvocationContext

PARENT_GONE = 70  # the exit code of a child whose replica died (EX_SOFTWARE)


class WorkerStopped(SystemExit):
    """Raised in a job by SIGTERM: the replica stopped it (timeout, interrupt, lost lease)."""


def main(conn: Connection, config: dict[str, Any], resolve: Callable[[Target], Any]) -> None:
    """The child's entry point (``multiprocessing``'s spawn calls it)."""
    child = _Child(conn, resolve)
    try:
        child.start(config)
        child.serve()
    except WorkerStopped:
        pass
    finally:
        logging.shutdown()


class _Child:
    def __init__(self, conn: Connection, resolve: Callable[[Target], Any]) -> None:
        self._conn = conn
        self._resolve = resolve
        self._send_lock = threading.Lock()
        self._token: CancelToken | None = None  # the running job's, if any

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        with self._send_lock:
            self._conn.send_bytes(data)

    def start(self, config: dict[str, Any]) -> None:
        """Signals, logging to the parent, the parent watch, then the task modules (one
        that fails to import is reported, and the child exits)."""
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        root = logging.getLogger()
        root.handlers[:] = [_Forward(self)]
        root.setLevel(config.get("log_level", logging.INFO))
        parent = multiprocessing.parent_process()
        if parent is not None:
            threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
        modules = [m for m in config.get("modules", ()) if _imported(m)]
        self.send({"t": "ready", "modules": modules})

    def serve(self) -> None:
        while True:
            try:
                raw = self._conn.recv_bytes()
            except (EOFError, OSError):  # the parent closed the pipe: recycled, or stopping
                return
            job = json.loads(raw)
            if "run" in job:
                self.send(self._run(job["run"]))
            elif "import" in job:  # before a job: its module, outside its timeout
                _imported(job["import"])
                self.send({"t": "imported", "module": job["import"]})

    def _run(self, job: dict[str, Any]) -> dict[str, Any]:
        token = CancelToken()
        ctx = InvocationContext(
            job["job_id"], job["scheduled_ms"], job["attempt"], job["fence"], job["lane"], token,
            None, _Progress(self),
        )  # fmt: skip
        cv = CURRENT.set(ctx)
        self._token = token
        # the invocation's span (tracing on, a span recording): the job's spans its children
        traced_as = traced.attach(job["trace"], job["job_id"]) if "trace" in job else None
        try:
            module = job.get("module")
            if module and module not in sys.modules:  # a task registered after this started
                importlib.import_module(module)
            fn = self._resolve(TaskRef(job["task"], job["args"]))
            result = asyncio.run(fn()) if coroutines.is_async(fn) else coroutines.call(fn)
            bad = validation.result_problem(result)  # as a thread lane's (docs/results.md)
            if bad is not None:
                return _error(type(bad).__name__, str(bad), "", rss())
            return {"t": "ok", "result": result, "rss": rss()}
        except WorkerStopped:
            raise
        except BaseException as exc:  # noqa: BLE001 - user code: everything is its outcome
            text = failures.text(exc)
            kind, _, message = text.partition(": ")
            return _error(kind, message, failures.trace(exc), rss())
        finally:
            if traced_as is not None:
                traced.detach(traced_as)
            self._token = None
            CURRENT.reset(cv)

    def _on_term(self, _signum: int, _frame: object) -> None:
        """SIGTERM: the invocation is told why (the reason the parent wrote first), then
        the job is stopped."""
        token, reason = self._token, "stopped by the replica"
        if token is None:  # between jobs: nothing to tell, just go
            raise WorkerStopped(0)
        try:
            if self._conn.poll():  # the main thread is in the job: not reading the pipe
                reason = json.loads(self._conn.recv_bytes()).get("stop", reason)
        except Exception:  # noqa: BLE001 - a reason is a courtesy
            pass
        token.cancel(reason)
        raise WorkerStopped(0)


def _imported(module: str) -> bool:
    """Import a task module ahead of its job; one that fails is left for the job itself
    to import, which then fails with that error (its own outcome, retried per its
    policy)."""
    try:
        importlib.import_module(module)
    except WorkerStopped:
        raise
    except BaseException:  # noqa: BLE001 - user code at import
        return False
    return True


def _error(kind: str, message: str, trace: str, rss_bytes: int | None) -> dict[str, Any]:
    return {"t": "error", "type": kind, "message": message, "trace": trace, "rss": rss_bytes}


def _exit_with(parent: Any) -> None:
    """The replica died (even SIGKILLed): so does this child, whatever its job does."""
    parent.join()
    os._exit(PARENT_GONE)


def rss() -> int | None:
    """This process's resident memory in bytes, now (Linux), else its peak (other Unix)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return peak if sys.platform == "darwin" else peak * 1024


class _Forward(logging.Handler):
    """The child's log records, sent to the replica, which logs them with the job's
    fields (job id, invocation, attempt, lane, replica)."""

    def __init__(self, child: _Child) -> None:
        super().__init__()
        self._child = child
        self._format = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc = self._format.formatException(record.exc_info) if record.exc_info else None
            self._child.send(
                {
                    "t": "log",
                    "name": record.name,
                    "level": record.levelno,
                    "msg": record.getMessage(),
                    "exc": exc or record.exc_text,
                    "created": record.created,
                    "where": [record.pathname, record.lineno, record.funcName],
                }
            )
        except Exception:  # noqa: BLE001
            self.handleError(record)


class _Progress:
    """``current_invocation().progress(value)`` in a worker process: checked here (a bad
    value raises in the job, as in a thread lane), sent to the replica, which writes it
    as a thread lane's progress (workers/progress.py, at most once a second)."""

    def __init__(self, child: _Child) -> None:
        self._child = child

    def report(self, _claim: Any, value: Any) -> None:
        validation.progress_json(value)
        self._child.send({"t": "progress", "value": value})
