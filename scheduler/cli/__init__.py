"""The ``duetime`` command line (``python -m scheduler``).

One package, one room per purpose: app.py (the group, exit codes, shared options, opening
a namespace), replica.py (``run``), produce.py (``enqueue``, ``backfill``), steer.py
(``cancel``, ``pause``, ``resume``, ``trigger``), observe.py (``ls``, ``show``, ``stats``,
``events``, ``top``), redo.py (``retry``, ``delete``, ``purge``), upkeep.py (``doctor``,
``quarantine``), libraries.py (``libraries``: Redis Functions), limits.py (``limit``),
web.py (``web``: the console), demo.py and demo_shared.py (``demo``), render.py (text and
JSON for people and scripts). Importing
the package registers every command on ``main``.
"""

try:  # a Ctrl-C while the commands load (~0.2 s) ends as one later does: 130, no traceback
    from scheduler.cli import (  # noqa: F401
        demo,
        libraries,
        limits,
        observe,
        produce,
        redo,
        replica,
        steer,
        upkeep,
        web,
    )
    from scheduler.cli.app import main
except KeyboardInterrupt:
    raise SystemExit(130) from None  # 128 + SIGINT, as DuetimeGroup ends a command

__all__ = ["main"]
