"""What the worker sees of a store: the messages it leases and the :class:`MessageStore`
protocol that the database store and the in-memory store both implement.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..exc import HandlerFailed

__all__ = [
    "LOST",
    "RELEASED",
    "RETRY",
    "BatchFailure",
    "BatchResult",
    "Handler",
    "HandlerFailed",
    "Incoming",
    "MessageStore",
    "ReapResult",
    "RetryAt",
    "StoredMessage",
]


#: Outcomes of one message besides ``done`` and ``dead``: retried later, lease lost,
#: given back unstarted.
RETRY, LOST, RELEASED = "retry", "lost", "released"


@dataclass(frozen=True)
class Incoming:
    """One message of a batch for :meth:`~sa_inbox.store.InboxStore.receive_many`.

    :param message_id: the producer-assigned id.
    :param payload: any JSON-serialisable value.
    :param aggregate_id: the aggregate (entity) the message is about, for ordering.
    :param message_type: optional, for handlers that dispatch on it.
    """

    message_id: str
    payload: Any
    aggregate_id: str | None = None
    message_type: str | None = None


@dataclass(frozen=True)
class StoredMessage:
    """A leased message, as the handler sees it.

    ``claimed_by`` is the lease token: the row is this worker's only while its
    ``claimed_by`` still holds it. ``attempts`` counts this attempt (1 on the first).
    """

    id: int
    message_id: str
    consumer_name: str
    payload: Any
    aggregate_id: str | None
    message_type: str | None
    attempts: int
    received_at: datetime.datetime
    claimed_by: str


@dataclass(frozen=True)
class ReapResult:
    """What :meth:`~sa_inbox.store.InboxStore.reap` did.

    :param released: rows back to ``pending``.
    :param dead: rows moved to ``dead``.
    """

    released: int
    dead: int


@dataclass(frozen=True)
class BatchFailure:
    """A message of a batch whose handler raised, recorded as a failed attempt.

    :param message: the message.
    :param error: the exception raised by its handler.
    :param retry_at: when it may be leased again (aware UTC), or ``None``: it is ``dead``.
    """

    message: StoredMessage
    error: BaseException
    retry_at: datetime.datetime | None


@dataclass(frozen=True)
class BatchResult:
    """What one batch transaction (:meth:`MessageStore.complete_batch`) committed.

    :param done: messages whose handler's change committed with ``done``.
    :param failed: messages recorded as failed attempts in the same transaction.
    :param lost: messages whose lease was no longer this batch's: nothing ran.
    :param released: messages given back unstarted (a stop request came mid-batch).
    """

    done: tuple[StoredMessage, ...] = ()
    failed: tuple[BatchFailure, ...] = ()
    lost: tuple[StoredMessage, ...] = ()
    released: tuple[StoredMessage, ...] = ()


#: ``retry_at(message)``: when a message that failed this attempt may be leased again
#: (aware UTC), or ``None`` when its attempts are used up (``dead``).
RetryAt = Callable[[StoredMessage], "datetime.datetime | None"]

#: A handler: ``handler(session, message)``. It runs in the transaction that marks the row
#: ``done`` and must not commit. (The in-memory store passes its own context for session.)
Handler = Callable[[Any, StoredMessage], object]


class MessageStore(Protocol):
    """What a :class:`~sa_inbox.store.worker.Worker` needs from a store.

    :class:`~sa_inbox.store.BoundStore` (a database) and
    :class:`sa_inbox.testing.MemoryStore` implement it. ``now`` is always an aware UTC
    datetime from the worker's clock. A ``consumer_name`` of ``None`` means every consumer.
    """

    def lease(
        self,
        *,
        consumer_name: str | None,
        claimed_by: str,
        limit: int,
        visibility_timeout: float,
        max_attempts: int,
        ordered: bool,
        now: datetime.datetime,
        abandoned: bool = True,
    ) -> list[StoredMessage]: ...

    def complete(
        self, message: StoredMessage, handler: Handler, *, now: datetime.datetime
    ) -> bool: ...

    def complete_batch(
        self,
        messages: Sequence[StoredMessage],
        handler: Handler,
        *,
        now: datetime.datetime,
        savepoints: bool,
        failed: Sequence[BatchFailure],
        retry_at: RetryAt,
        stopping: Callable[[], bool],
    ) -> BatchResult: ...

    def fail(
        self,
        message: StoredMessage,
        error: str,
        *,
        retry_at: datetime.datetime | None,
        now: datetime.datetime,
    ) -> bool: ...

    def release(self, messages: Sequence[StoredMessage]) -> int: ...

    def reap(
        self,
        *,
        consumer_name: str | None,
        visibility_timeout: float,
        max_attempts: int,
        now: datetime.datetime,
    ) -> ReapResult: ...

    def has_unfinished(self, *, consumer_name: str | None) -> bool:
        """Whether any message of the consumer is ``pending`` or ``processing`` now."""
        ...

    def is_transient(self, exc: BaseException) -> bool: ...
