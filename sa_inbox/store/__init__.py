"""The store-then-process inbox: receive a message durably, process it later.

==========================  ===================================================================
module                      what it holds
==========================  ===================================================================
:mod:`.schema`              the store table, its statuses and defaults
:mod:`.protocol`            what a worker sees of a store (:class:`MessageStore`), the messages
:mod:`.store`               :class:`InboxStore` on a database, composed of the parts below
:mod:`.base`                the store's shared state and short transaction
:mod:`.receive`             the receive: insert-or-skip in the caller's transaction
:mod:`.transitions`         a row's state transitions: lease, complete, fail, release, reap
:mod:`.admin`               replay, counts, ``has_unfinished``
:mod:`.values`              the store's argument checks (times, durations, counts)
:mod:`.bound`               :class:`BoundStore`: the store on one engine, for a worker
:mod:`.leases`              the leased-row core, shared with the outbox relay
:mod:`.replay`              the replay's rules, shared with the outbox relay
:mod:`.worker`              :class:`Worker`: lease with ``SKIP LOCKED``, process, back off
:mod:`.batch`               the worker's batch transaction mode (``transaction="batch"``)
==========================  ===================================================================

The in-memory store for tests is :class:`sa_inbox.testing.MemoryStore`. Every name of the
former ``sa_inbox.store`` module is importable from here.
"""

from __future__ import annotations

from .protocol import Handler as Handler
from .protocol import Incoming as Incoming
from .protocol import MessageStore as MessageStore
from .protocol import ReapResult as ReapResult
from .protocol import StoredMessage as StoredMessage
from .schema import DEAD as DEAD
from .schema import DEFAULT_CONSUMER as DEFAULT_CONSUMER
from .schema import DEFAULT_STORE_TABLE as DEFAULT_STORE_TABLE
from .schema import DONE as DONE
from .schema import MAX_ERROR_LENGTH as MAX_ERROR_LENGTH
from .schema import PENDING as PENDING
from .schema import PROCESSING as PROCESSING
from .schema import REAP_BATCH as REAP_BATCH
from .schema import STATUSES as STATUSES
from .schema import UTCDateTime as UTCDateTime
from .schema import inbox_store_table as inbox_store_table
from .schema import utc_now as utc_now
from .store import BoundStore as BoundStore
from .store import InboxStore as InboxStore
from .worker import Backoff as Backoff
from .worker import Worker as Worker
from .worker import WorkerSummary as WorkerSummary

__all__ = [
    "DEAD",
    "DEFAULT_CONSUMER",
    "DEFAULT_STORE_TABLE",
    "DONE",
    "MAX_ERROR_LENGTH",
    "PENDING",
    "PROCESSING",
    "REAP_BATCH",
    "STATUSES",
    "Backoff",
    "BoundStore",
    "Handler",
    "InboxStore",
    "Incoming",
    "MessageStore",
    "ReapResult",
    "StoredMessage",
    "UTCDateTime",
    "Worker",
    "WorkerSummary",
    "inbox_store_table",
    "utc_now",
]
