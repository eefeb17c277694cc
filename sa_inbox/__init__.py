"""sa-inbox: exactly-once message processing for SQLAlchemy (the inbox pattern).

Claim ``(message_id, consumer_name)`` in the same transaction as the business change; the
database's primary key rejects every redelivery. See :class:`Inbox`.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from .claim import Inbox as Inbox
from .collision import payload_hash as payload_hash
from .exc import AsyncHandlerError as AsyncHandlerError
from .exc import AutocommitConnection as AutocommitConnection
from .exc import ClaimLost as ClaimLost
from .exc import ClaimWarning as ClaimWarning
from .exc import ConfigurationError as ConfigurationError
from .exc import ConsumerNameTaken as ConsumerNameTaken
from .exc import DatabaseUnavailable as DatabaseUnavailable
from .exc import DeadLetterQueueUnavailable as DeadLetterQueueUnavailable
from .exc import DuplicateMessage as DuplicateMessage
from .exc import HandlerEndedTransaction as HandlerEndedTransaction
from .exc import InboxError as InboxError
from .exc import InvalidArgument as InvalidArgument
from .exc import InvalidBind as InvalidBind
from .exc import InvalidDeadLetterArgument as InvalidDeadLetterArgument
from .exc import InvalidHandler as InvalidHandler
from .exc import InvalidKeySetting as InvalidKeySetting
from .exc import InvalidMessageId as InvalidMessageId
from .exc import InvalidObject as InvalidObject
from .exc import InvalidRetentionPolicy as InvalidRetentionPolicy
from .exc import InvalidRetryArgument as InvalidRetryArgument
from .exc import InvalidSessionFactory as InvalidSessionFactory
from .exc import InvalidStoreArgument as InvalidStoreArgument
from .exc import InvalidStrategy as InvalidStrategy
from .exc import InvalidTable as InvalidTable
from .exc import InvalidTableType as InvalidTableType
from .exc import MessageIdCollision as MessageIdCollision
from .exc import MissingExtra as MissingExtra
from .exc import MissingKeyHeader as MissingKeyHeader
from .exc import MissingTable as MissingTable
from .exc import PurgeLockTimeout as PurgeLockTimeout
from .exc import RetentionWindowTooShort as RetentionWindowTooShort
from .exc import SplitTransaction as SplitTransaction
from .exc import SyncAsyncMismatch as SyncAsyncMismatch
from .exc import TransientClaimError as TransientClaimError
from .exc import UnsafePartitionKey as UnsafePartitionKey
from .exc import UnsafeTransaction as UnsafeTransaction
from .exc import UnsupportedBackend as UnsupportedBackend
from .exc import UnsupportedBroker as UnsupportedBroker
from .idempotency import idempotency_key as idempotency_key
from .retention import RetentionPolicy as RetentionPolicy
from .retention import StorePurgeResult as StorePurgeResult
from .retention import purge as purge
from .retention import purge_store as purge_store
from .runner import Outcome as Outcome
from .runner import Result as Result
from .runner import handle as handle
from .runner import is_transient as is_transient
from .runner import run_in_transaction as run_in_transaction
from .schema import InboxMessageMixin as InboxMessageMixin
from .schema import processed_messages_table as processed_messages_table
from .session import install as install
from .session import register_claim as register_claim
from .store import Backoff as Backoff
from .store import InboxStore as InboxStore
from .store import Incoming as Incoming
from .store import StoredMessage as StoredMessage
from .store import Worker as Worker

__all__ = [
    "AsyncHandlerError",
    "AutocommitConnection",
    "Backoff",
    "ClaimLost",
    "ClaimWarning",
    "ConfigurationError",
    "ConsumerNameTaken",
    "DatabaseUnavailable",
    "DeadLetterQueueUnavailable",
    "DuplicateMessage",
    "HandlerEndedTransaction",
    "Inbox",
    "InboxError",
    "InboxMessageMixin",
    "InboxStore",
    "Incoming",
    "InvalidArgument",
    "InvalidBind",
    "InvalidDeadLetterArgument",
    "InvalidHandler",
    "InvalidKeySetting",
    "InvalidMessageId",
    "InvalidObject",
    "InvalidRetentionPolicy",
    "InvalidRetryArgument",
    "InvalidSessionFactory",
    "InvalidStoreArgument",
    "InvalidStrategy",
    "InvalidTable",
    "InvalidTableType",
    "MessageIdCollision",
    "MissingExtra",
    "MissingKeyHeader",
    "MissingTable",
    "Outcome",
    "PurgeLockTimeout",
    "Result",
    "RetentionPolicy",
    "RetentionWindowTooShort",
    "SplitTransaction",
    "StorePurgeResult",
    "StoredMessage",
    "SyncAsyncMismatch",
    "TransientClaimError",
    "UnsafePartitionKey",
    "UnsafeTransaction",
    "UnsupportedBackend",
    "UnsupportedBroker",
    "Worker",
    "handle",
    "idempotency_key",
    "install",
    "is_transient",
    "payload_hash",
    "processed_messages_table",
    "purge",
    "purge_store",
    "register_claim",
    "run_in_transaction",
]

#: The installed distribution's version (``pyproject.toml`` holds the only copy).
__version__ = _metadata.version("sa-inbox")
