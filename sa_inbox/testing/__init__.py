"""Helpers for users' own tests.

:class:`MemoryStore` (:mod:`.memory`) is the inbox store in memory: a handler and the
store's :class:`~sa_inbox.store.worker.Worker` unit-tested without a database.
"""

from __future__ import annotations

from .memory import MemoryRow as MemoryRow
from .memory import MemoryStore as MemoryStore

__all__ = ["MemoryRow", "MemoryStore"]
