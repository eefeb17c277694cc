"""sa-inbox: exactly-once message processing for SQLAlchemy (the inbox pattern).

Claim ``(message_id, consumer_name)`` in the same transaction as the business change; the
database's primary key rejects every redelivery. See :class:`Inbox`.

The top level holds what most applications use; everything else is imported from its
module: the exceptions from :mod:`sa_inbox.exc`, the store's types from
:mod:`sa_inbox.store`, the retention helpers from :mod:`sa_inbox.retention`. The names that
left the top level still resolve here for one release, with a :class:`DeprecationWarning`
naming their module.
"""

from __future__ import annotations

import importlib as _importlib
import warnings as _warnings
from importlib import metadata as _metadata
from typing import TYPE_CHECKING

from .claim import Inbox as Inbox
from .exc import ConfigurationError as ConfigurationError
from .exc import DuplicateMessage as DuplicateMessage
from .exc import InboxError as InboxError
from .exc import TransientClaimError as TransientClaimError
from .idempotency import idempotency_key as idempotency_key
from .retention import RetentionPolicy as RetentionPolicy
from .retention import purge as purge
from .runner import Outcome as Outcome
from .runner import Result as Result
from .runner import handle as handle
from .runner import run_in_transaction as run_in_transaction
from .schema import InboxMessageMixin as InboxMessageMixin
from .schema import processed_messages_table as processed_messages_table
from .session import install as install
from .session import register_claim as register_claim
from .store import Backoff as Backoff
from .store import InboxStore as InboxStore
from .store import Worker as Worker

__all__ = [
    "Backoff",
    "ConfigurationError",
    "DuplicateMessage",
    "Inbox",
    "InboxError",
    "InboxMessageMixin",
    "InboxStore",
    "Outcome",
    "Result",
    "RetentionPolicy",
    "TransientClaimError",
    "Worker",
    "handle",
    "idempotency_key",
    "install",
    "processed_messages_table",
    "purge",
    "register_claim",
    "run_in_transaction",
]

#: The installed distribution's version (``pyproject.toml`` holds the only copy).
__version__ = _metadata.version("sa-inbox")

#: The names that left the top level, resolved for one release by :func:`__getattr__`:
#: name -> the module to import it from.
_MOVED = {
    "AsyncHandlerError": "sa_inbox.exc",
    "AutocommitConnection": "sa_inbox.exc",
    "ClaimLost": "sa_inbox.exc",
    "ClaimWarning": "sa_inbox.exc",
    "ConsumerNameTaken": "sa_inbox.exc",
    "DatabaseUnavailable": "sa_inbox.exc",
    "DeadLetterQueueUnavailable": "sa_inbox.exc",
    "HandlerEndedTransaction": "sa_inbox.exc",
    "Incoming": "sa_inbox.store",
    "InvalidBind": "sa_inbox.exc",
    "InvalidDeadLetterArgument": "sa_inbox.exc",
    "InvalidHandler": "sa_inbox.exc",
    "InvalidKeySetting": "sa_inbox.exc",
    "InvalidMessageId": "sa_inbox.exc",
    "InvalidObject": "sa_inbox.exc",
    "InvalidRetentionPolicy": "sa_inbox.exc",
    "InvalidRetryArgument": "sa_inbox.exc",
    "InvalidSessionFactory": "sa_inbox.exc",
    "InvalidStoreArgument": "sa_inbox.exc",
    "InvalidStrategy": "sa_inbox.exc",
    "InvalidTable": "sa_inbox.exc",
    "InvalidTableType": "sa_inbox.exc",
    "MessageIdCollision": "sa_inbox.exc",
    "MissingExtra": "sa_inbox.exc",
    "MissingKeyHeader": "sa_inbox.exc",
    "MissingTable": "sa_inbox.exc",
    "PurgeLockTimeout": "sa_inbox.exc",
    "RetentionWindowTooShort": "sa_inbox.exc",
    "SplitTransaction": "sa_inbox.exc",
    "StorePurgeResult": "sa_inbox.retention",
    "StoredMessage": "sa_inbox.store",
    "SyncAsyncMismatch": "sa_inbox.exc",
    "UnsafePartitionKey": "sa_inbox.exc",
    "UnsafeTransaction": "sa_inbox.exc",
    "UnsupportedBackend": "sa_inbox.exc",
    "UnsupportedBroker": "sa_inbox.exc",
    "is_transient": "sa_inbox.runner",
    "payload_hash": "sa_inbox.collision",
    "purge_store": "sa_inbox.retention",
}

if not TYPE_CHECKING:  # type checkers report the old names as missing, so code moves on

    def __getattr__(name: str) -> object:
        """A name that left the top level, from its module, with a DeprecationWarning.

        :raises AttributeError: for any other name.
        """
        module = _MOVED.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        _warnings.warn(
            f"sa_inbox.{name} is deprecated and leaves the top level in the next release: "
            f"use {module}.{value.__name__}",
            DeprecationWarning,
            stacklevel=2,
        )
        return value
