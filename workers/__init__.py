"""Executing user code: bounded pools, lanes, timeouts, lease heartbeats, failure isolation.

Imports only ``scheduler.model``, ``scheduler.errors``, ``scheduler.clock`` and
``scheduler.stores.base`` from the scheduler package.
"""
