"""``duetime run``'s task modules: imported as ``python -m`` finds modules (``--import``,
``--path``), each failure one line that says what to fix, and no replica without a task."""

from __future__ import annotations

import importlib
import logging
import os
import pathlib
import sys
import sysconfig
import threading
import traceback

import workers
from scheduler.cli.app import EXIT_USAGE, fail


def import_tasks(
    modules: tuple[str, ...], paths: tuple[str, ...], *, allow_none: bool = False
) -> None:
    """Import the task modules as ``python -m`` would find them: from the working
    directory, and from each ``--path`` first. A module that cannot be imported ends
    the command with one line (exit 2); so does a registry left empty, unless
    ``allow_none`` (then a warning): such a replica would claim jobs and fail each one."""
    for path in paths:
        if not os.path.isdir(path):
            fail(
                f"--path {path!r} is not a directory: give the folder that holds the task modules",
                EXIT_USAGE,
            )
    for entry in reversed((os.getcwd(), *paths)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    for module in modules:
        if not module or module.startswith(".") or "/" in module or "\\" in module:
            fail(  # a path or nothing (relative imports need a package: none here)
                f"--import {module!r} is not a module name: give one like myapp.tasks (the "
                "folder that holds it with --path DIR)",
                EXIT_USAGE,
            )
        try:
            _import(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not _is_or_contains(module, exc.name):
                fail(_raised(module, exc), EXIT_USAGE)  # found; an import inside it failed
            fail(_not_found(module, exc, paths), EXIT_USAGE)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code at import
            if os.environ.get("DUETIME_TRACEBACK"):
                traceback.print_exception(exc)
            fail(_raised(module, exc), EXIT_USAGE)
    from scheduler import tasks

    if tasks.names():
        return
    why = "no --import given" if not modules else "the modules imported define none"
    if allow_none:
        logging.getLogger("duetime").warning(
            "no task is registered (%s; --allow-no-tasks): this replica claims no job (it "
            "only reaps expired leases)",
            why,
        )
        return
    fail(
        f"no task is registered ({why}): give --import MODULE for each module that defines "
        "your @task functions (--path DIR if it is not importable from here), or "
        "--allow-no-tasks for a replica that runs none",
        EXIT_USAGE,
    )


#: Seconds an import may take before the replica says what it waits for.
SLOW_IMPORT_S = 10.0


def _import(module: str) -> None:
    """Import ``module``; one that is still importing after ``SLOW_IMPORT_S`` is named in a
    warning (the replica starts only when the import returns, and said nothing)."""
    timer = threading.Timer(SLOW_IMPORT_S, _still_importing, (module,))
    timer.daemon = True
    timer.start()
    try:
        importlib.import_module(module)
    finally:
        timer.cancel()


def _still_importing(module: str) -> None:
    logging.getLogger("duetime").warning(
        "still importing %s after %g s: this replica starts when its import returns; a "
        "module that blocks while it is imported (a server or a loop started at import) "
        "keeps it waiting: start such work inside a task, or under "
        "if __name__ == '__main__'",
        module,
        SLOW_IMPORT_S,
    )


def _is_or_contains(module: str, missing: str) -> bool:
    """Whether the module not found is ``module`` itself or one of its parent packages."""
    return module == missing or module.startswith(missing + ".")


def _not_found(module: str, exc: BaseException, paths: tuple[str, ...]) -> str:
    where = ", ".join(paths) or os.getcwd()
    hint = "run from the folder that holds it, or pass --path DIR"
    if module.endswith(".py"):
        hint = f"--import takes a module name, not a file: --import {module[:-3]}"
    elif "," in module or " " in module:
        hint = "give --import once per module: --import a --import b"
    elif ":" in module:  # uvicorn's module:attribute
        hint = (
            "--import takes a module name; its @task functions register themselves: "
            f"--import {module.split(':', 1)[0]}"
        )
    return f"cannot import task module {module!r} ({exc}); {hint} (searched: {where})"


def _raised(module: str, exc: BaseException) -> str:
    """A task module that was found but failed while it was imported: where, and what."""
    if isinstance(exc, SyntaxError):
        return (
            f"task module {module!r} has a syntax error: {exc.msg} ({exc.filename}, "
            f"line {exc.lineno})"
        )
    stdlib = sysconfig.get_paths()["stdlib"]
    packages = (pathlib.Path(__file__).resolve().parents[1], pathlib.Path(workers.__file__).parent)
    ours = tuple(str(d.resolve()) + os.sep for d in packages)  # scheduler/, workers/
    tb, at = exc.__traceback__, ""
    while tb is not None:  # the innermost frame of user code (not the stdlib's, not duetime's)
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith(("<", stdlib, *ours)):
            at = f" at {name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return (
        f"task module {module!r} raised {type(exc).__name__}{at} while it was imported "
        f"({exc}); fix the module (DUETIME_TRACEBACK=1 shows the traceback)"
    )
