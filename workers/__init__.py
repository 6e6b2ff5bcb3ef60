"""Executing user code: bounded pools, lanes, timeouts, lease heartbeats, failure isolation.

The narrow surface of ``scheduler`` that ``workers`` may use (tests/unit/test_architecture.py
reads this list):

    scheduler.model, scheduler.errors, scheduler.clock, scheduler.metrics,
    scheduler.validation, scheduler.stores.base

Only the engine (``scheduler/engine.py``) and the CLI (``scheduler/cli/``) import
``workers``; ``scheduler/__init__.py`` re-exports ``current_invocation`` lazily.
"""
