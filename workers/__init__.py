"""Executing user code: bounded pools, lanes, timeouts, lease heartbeats, failure isolation.

The narrow surface of ``scheduler`` that ``workers`` may use (tests/unit/test_architecture.py
reads this list):

    scheduler.model, scheduler.lane, scheduler.errors, scheduler.clock, scheduler.metrics,
    scheduler.validation, scheduler.stores.base,
    scheduler.stores.redis.protocol.fenced (workers/effects/redis.py only: a fenced
    write to the user's own Redis is a Lua script, and scripts are sent by the Redis
    wing's gateway alone; the wing's module takes the invocation's fields, the helper
    finds the running invocation, which the wing may not import)

Only the engine (``scheduler/engine.py``) and the CLI (``scheduler/cli/``) import
``workers``; ``scheduler/__init__.py`` re-exports ``current_invocation`` lazily.
"""
