"""What a job's exception becomes in logs and in the store: its text and its traceback,
each bounded, and never an exception of their own (an ``__str__`` that raises used to
stop the worker's bookkeeping, leaving the invocation "running" until its lease
expired; a 10 MB message was logged whole)."""

from __future__ import annotations

import asyncio
import os
import traceback
from types import TracebackType

from scheduler.errors import ProcessJobError
from scheduler.stores.base import TRACEBACK_MAX

ERROR_MAX = 4000  # characters of an error's text kept (a store's last_error, a log line)


def text(error: BaseException) -> str:
    """``"Type: message"``, at most ERROR_MAX characters, whatever the exception's
    ``__str__`` does. A process lane's job error is the child's own type and message."""
    if isinstance(error, ProcessJobError):
        return _bounded(f"{error.kind}: {error.message}")
    try:
        message = str(error)
    except BaseException as exc:  # noqa: BLE001 - user code: anything may come out of it
        message = f"<str() of the exception failed: {type(exc).__name__}>"
    return _bounded(f"{type(error).__name__}: {message}")


def _bounded(out: str) -> str:
    if len(out) > ERROR_MAX:
        out = f"{out[: ERROR_MAX - 40]}... ({len(out)} characters in all)"
    return out


def trace(error: BaseException) -> str:
    """The formatted traceback from the job's own first frame (the worker's frames that
    called it are left out), its last TRACEBACK_MAX bytes (where the error is). A process
    lane's job error carries the child's traceback text."""
    try:
        if isinstance(error, ProcessJobError):
            tb = error.trace
        else:
            tb = "".join(traceback.format_exception(type(error), error, _from_the_job(error)))
    except BaseException as exc:  # noqa: BLE001
        return f"<the traceback could not be formatted: {type(exc).__name__}>"
    raw = tb.rstrip().encode()
    if len(raw) <= TRACEBACK_MAX:
        return tb.rstrip()
    return "... " + raw[-TRACEBACK_MAX + 4 :].decode(errors="ignore")


# where the frames that call a job live: this package, and asyncio (an async job's error
# comes back through the loop's run_until_complete)
_CALLERS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep,
)


def _from_the_job(error: BaseException) -> TracebackType | None:
    """``error``'s traceback without its leading frames in this package or asyncio (the
    runner, the call of the job, an event loop): what an operator reads starts at their
    code. All of it when every frame is ours (the call itself failed: arguments the
    function refuses, say)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_CALLERS):
        tb = tb.tb_next
    return tb or error.__traceback__
