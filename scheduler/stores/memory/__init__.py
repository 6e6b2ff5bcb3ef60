"""The in-process store: jobs live in this process's memory and vanish with it.

``MemoryStore`` (store.py) is the reference implementation of ``stores.base.Store``; its
per-job records are in records.py and the planning of a recurring series in series.py.
"""

from scheduler.stores.memory.store import MemoryStore

__all__ = ["MemoryStore"]
