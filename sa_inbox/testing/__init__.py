"""Helpers for users' own tests.

* :func:`check_exactly_once` (:mod:`.kit`): the inbox pattern's three tests (sequential
  duplicate, concurrent duplicate, crash between commit and ack) and the mistakes they
  catch, run on one consumer against the user's real database, in one call. The pytest
  plugin :mod:`.plugin` offers it as the ``exactly_once`` fixture.
* :mod:`.faults`: faults to inject in integration tests against real brokers (a
  delivery twice, deliveries held together at their claim, a crash after the commit, a
  stall past the visibility timeout, a database outage through :class:`DatabaseProxy`).
* :class:`MemoryStore` (:mod:`.memory`): the inbox store in memory, to unit-test a handler
  and the store's :class:`~sa_inbox.store.worker.Worker` without a database.
"""

from __future__ import annotations

from .adapters import AdapterProfile as AdapterProfile
from .adapters import register_adapter as register_adapter
from .kit import check_exactly_once as check_exactly_once
from .kit import check_exactly_once_async as check_exactly_once_async
from .memory import MemoryRow as MemoryRow
from .memory import MemoryStore as MemoryStore
from .messages import BrokerDelivery as BrokerDelivery
from .messages import Message as Message
from .modes import MODES as MODES
from .modes import FailureMode as FailureMode
from .proxy import DatabaseProxy as DatabaseProxy
from .report import Finding as Finding
from .report import Report as Report

__all__ = [
    "MODES",
    "AdapterProfile",
    "BrokerDelivery",
    "DatabaseProxy",
    "FailureMode",
    "Finding",
    "MemoryRow",
    "MemoryStore",
    "Message",
    "Report",
    "check_exactly_once",
    "check_exactly_once_async",
    "register_adapter",
]
