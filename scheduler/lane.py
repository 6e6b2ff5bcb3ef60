"""``Lane``: a lane's workers and where they run its jobs, threads or processes
(docs/lanes.md), as ``lanes=`` and ``duetime run --lane`` take it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal


@dataclass(frozen=True)
class Lane:
    """A lane's workers and where they run its jobs (``lanes={"reports": Lane(2, "process")}``;
    a plain int is ``Lane(n)``). ``isolation="thread"``: worker threads, as ever (a timeout
    is cooperative). ``"process"``: each worker drives a child process that runs the job
    (registered tasks only: a name and JSON arguments), so a timeout or an interrupt stops
    it (SIGTERM, then SIGKILL after ``kill_grace`` seconds) and a crash fails only that
    invocation. A process lane's child is replaced after ``max_jobs`` jobs, or once its
    resident memory passes ``max_memory_mb`` after a job (None: never). docs/lanes.md."""

    workers: int = 1
    isolation: Literal["thread", "process"] = "thread"
    max_jobs: int | None = None
    max_memory_mb: float | None = None
    kill_grace: float = 5.0

    #: the most workers one lane may start: threads, or (each a Python process of ~40 MB,
    #: started with the scheduler) worker processes
    MAX_THREADS: ClassVar[int] = 4096
    MAX_PROCESSES: ClassVar[int] = 256

    def __post_init__(self) -> None:
        for name in ("workers", "max_jobs"):
            v = getattr(self, name)
            if (v is not None or name == "workers") and (
                isinstance(v, bool) or not isinstance(v, int) or v < 1
            ):
                raise ValueError(f"Lane.{name} must be an int >= 1, got {v!r}")
        if self.isolation not in ("thread", "process"):
            raise ValueError(f"Lane.isolation is 'thread' or 'process', got {self.isolation!r}")
        most = self.MAX_PROCESSES if self.isolation == "process" else self.MAX_THREADS
        if self.workers > most:
            raise ValueError(
                f"Lane.workers: {self.workers} is more than the {most} worker "
                f"{'processes' if self.isolation == 'process' else 'threads'} one lane may "
                "start; use fewer, or spread the work over lanes or replicas"
            )
        for name, low in (("max_memory_mb", 1.0), ("kill_grace", 0.0)):
            v = getattr(self, name)
            if v is None and name == "max_memory_mb":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= 1e6:
                raise ValueError(
                    f"Lane.{name} must be a number of {'MB' if low else 'seconds'} in "
                    f"[{low:g}, 1e6], got {v!r}"
                )
        if self.isolation == "thread" and (
            self.max_jobs is not None or self.max_memory_mb is not None
        ):
            raise ValueError(
                "Lane.max_jobs and Lane.max_memory_mb recycle worker processes: they need "
                "isolation='process'"
            )
