"""Errors duetime raises. Each message says what happened and what to do about it."""

from __future__ import annotations


class DuetimeError(Exception):
    """Base class of every duetime error."""


class SchedulerClosedError(DuetimeError, RuntimeError):
    """The scheduler was shut down; it accepts no new work."""

    def __init__(self, what: str = "schedule") -> None:
        super().__init__(
            f"cannot {what}: this scheduler has been shut down; create a new one "
            "(pending jobs of a shared store stay there for other replicas)"
        )


class ClientClosedError(DuetimeError, RuntimeError):
    """A ``Client`` or ``AsyncClient`` was used after ``close()`` (or after its ``with``
    block): it would open a connection that nobody closes."""

    def __init__(self, kind: str = "Client") -> None:
        block = "async with" if kind.startswith("Async") else "with"
        super().__init__(
            f"this {kind} is closed: open a new one ({kind}(url)), or keep using it "
            f"inside its `{block}` block"
        )


class EventLoopMismatchError(DuetimeError, RuntimeError):
    """An ``AsyncClient`` used on an event loop other than the one it first ran on: its
    connections belong to that loop (redis.asyncio would fail with "Event loop is closed"
    or "attached to a different loop")."""

    def __init__(self) -> None:
        super().__init__(
            "this AsyncClient was first used on another event loop, which owns its "
            "connections: create an AsyncClient inside each event loop (for example in the "
            "coroutine that asyncio.run() runs), or use the sync Client"
        )


class JobNotFoundError(DuetimeError, KeyError):
    """No job with this id exists in the store."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}; list jobs to see the known ids")
        self.job_id = job_id

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TaskNotRegisteredError(DuetimeError, LookupError):
    """A task name (or a callable) that the task registry does not know."""


class PayloadError(DuetimeError, ValueError):
    """Job arguments that are not JSON or exceed the payload limit."""


class KeyRuleError(DuetimeError, ValueError):
    """A job added without a ``limit_key`` whose key rule (docs/flow-control.md, "A job's
    limit key") cannot make its key: the rule needs a keyword argument the job lacks, or
    has of another type than str or int, or makes a text that is not a limit key. Nothing
    was written (for ``enqueue_many``: nothing of the batch)."""


class KeyRulesChangedError(DuetimeError, RuntimeError):
    """A shared store refused an add sent with the stamp of key rules that have changed
    since (add.lua's check; the store reloads the rules and sends the add again once, so
    this is seen only when they changed again meanwhile). Nothing of the refused jobs was
    written."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "the namespace's key rules changed twice while these jobs were being added, so "
            "none of the refused ones was written: add them again"
            + (f" ({detail})" if detail else "")
        )


class InvocationTimeout(DuetimeError, TimeoutError):
    """A job ran past its timeout (recorded as its failure; it was asked to stop)."""


class InvocationCancelled(DuetimeError):
    """A running async job was cancelled (``cancel(interrupt=True)``, or its lease was
    lost) and did not fail by itself: recorded as such, never as a success."""


class WorkerProcessError(DuetimeError, RuntimeError):
    """A process lane's worker process ended without replying while it ran a job (a
    signal such as SIGKILL or a segfault, ``os._exit``, the OOM killer), or could not
    start: that invocation fails with this (its retry policy applies), a fresh worker
    process replaces the dead one, and the replica goes on."""


class ProcessJobError(DuetimeError):
    """A job in a process lane raised: what its worker process reported (the exception's
    type name, message and traceback text; the exception itself stays in the child)."""

    def __init__(self, kind: str, message: str, trace: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.message, self.trace = kind, message, trace


class StaleFenceError(DuetimeError, RuntimeError):
    """A fenced write (``workers.effects``) was refused: the sink has already seen a newer
    fence for this job's occurrence, so another owner re-ran it after this one lost its
    lease. Nothing was written by the refused call."""

    def __init__(
        self, job_id: str, scheduled_ms: int, fence: int, newest: int | None, sink: str
    ) -> None:
        seen = f"fence {newest}" if newest is not None else "a newer fence"
        super().__init__(
            f"write refused by {sink}: invocation {job_id}@{scheduled_ms} holds fence {fence}, "
            f"but {seen} has written for it (this owner lost its lease and the job re-ran "
            "elsewhere); do not retry the write: let the job return, the newer run's effect "
            "is the one that counts"
        )
        self.job_id, self.scheduled_ms = job_id, scheduled_ms
        self.fence, self.newest, self.sink = fence, newest, sink


# ---- a shared (Redis) store ----------------------------------------------------------


class StoreUnavailableError(DuetimeError, ConnectionError):
    """Redis could not be reached (or answered with an error we cannot act on)."""


class StoreFullError(DuetimeError, RuntimeError):
    """Redis is out of memory (``maxmemory`` reached under ``noeviction``): nothing was
    written. Replicas still claim what is due and record outcomes (lua/README.md).
    ``url``: the server's, without its password."""

    url = ""

    def __init__(self, message: str, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class StoreConfigError(DuetimeError, RuntimeError):
    """The Redis server is configured in a way that breaks duetime's guarantees."""


class WrongServerError(StoreConfigError):
    """The URL reaches a server of another kind than it says: a database the server lacks,
    a plain server named as a sentinel, a sentinel named as a server (``handshake_refused``;
    the CLI's exit 3, as for a server it cannot reach)."""


class LayoutRefusedError(StoreConfigError):
    """The namespace holds data of a layout this version does not read: a newer duetime
    wrote it. Nothing this version does there can succeed until it is upgraded: a starting
    replica and every command refuse; a running replica stops claiming and its ``duetime
    run`` exits 1 (docs/operating.md, *Replicas with different code*)."""


class StoreCorruptError(StoreConfigError):
    """A namespace-wide key (a due set, ``lease``, ``running``, ``events``, ``stats``, a
    counter, ...) holds the wrong type or a counter that is not an integer. Such a key
    cannot be moved aside like one job: every script that meets it refuses to run
    (nothing written) until an operator repairs it. ``key`` names it; ``logged`` is True
    once the store has reported it (at most one log line per key per minute)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key
        self.logged = False


class EmbeddedRedisError(DuetimeError, RuntimeError):
    """The embedded Redis server could not be found, started or reached."""


class ShardCountError(DuetimeError, RuntimeError):
    """The namespace was created with another shard count than this store's."""


class JobFailed(DuetimeError, RuntimeError):
    """What a handle's ``result()`` raises when the invocation it waits for did not
    succeed: ``state`` is ``failed`` (its retries spent: dead-lettered), ``timed_out``
    (failed by its timeout), ``interrupted`` (an operator's ``cancel(interrupt=True)``),
    ``abandoned`` (its lease lost, at-most-once delivery), ``cancelled`` (the job was
    cancelled before the invocation ran) or ``deleted``; ``error_type`` and ``message``
    are the job's exception's class name and text ("" when there was none);
    ``invocation`` is its id ``"<job>@<ms>"``, or "" when the outcome was read from a
    finished one-off's record (which keeps no instant)."""

    def __init__(
        self,
        job_id: str,
        invocation: str,
        state: str,
        error_type: str = "",
        message: str = "",
    ) -> None:
        self.job_id, self.invocation, self.state = job_id, invocation, state
        self.error_type, self.message = error_type, message
        what = f": {error_type}: {message}" if error_type else (f": {message}" if message else "")
        named = f" invocation {invocation}" if invocation else ""
        super().__init__(f"job {job_id!r}{named} {state}{what}")


class ResultTimeoutError(DuetimeError, TimeoutError):
    """A handle's ``result(timeout=)`` ran out before the invocation ended (it may still
    run: call ``result()`` again to keep waiting, or ``Client.get`` to see where it is)."""


class ResultNotJSONError(DuetimeError, TypeError):
    """A job returned a value that is not JSON (or is over the stored result's size
    limit): the invocation fails with this error instead of succeeding, so a handle never
    receives a value other than the one returned."""


class ProgressError(DuetimeError, ValueError):
    """``current_invocation().progress(value)`` was given a value that is not JSON or is
    over the progress size limit; nothing was stored."""
