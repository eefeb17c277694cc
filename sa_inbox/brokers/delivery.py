"""What every broker adapter hands to the inbox: a :class:`Delivery`, and how it was settled.

A broker delivers a message at least once. The adapters of :mod:`sa_inbox.brokers` turn each
broker's message into a :class:`Delivery` (the producer's key, the body, the broker's delivery
count) and a :class:`Settler` (ack, retry, dead-letter on that broker), and
:func:`sa_inbox.brokers.process` decides which of the three happens. The decision is the same
for every broker; only these edges differ.

The dedup key is always the **producer's**: the AMQP ``message_id`` property or a header,
stream field or NATS header the user names. A delivery tag, stream entry id, stream sequence
or redelivery counter changes from one delivery to the next and would let every redelivery
through, so adapters keep them in :attr:`Delivery.broker_ref`, for logs only.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "DeadLetterReason",
    "Delivery",
    "Disposition",
    "Settlement",
    "Settler",
]


@dataclass(frozen=True)
class Delivery:
    """One delivery of a message by a broker.

    :param message_id: the producer-assigned dedup key (``str``), or None when the message
        carries none (it is then dead-lettered, never processed).
    :param body: the message body, bytes as the broker delivered them.
    :param delivery_count: which delivery of this message this is, ``1`` for the first, as
        the broker counts (AMQP ``x-delivery-count`` / ``x-death``, Redis ``XPENDING``'s
        delivery counter, JetStream's ``num_delivered``); at least 1.
    :param headers: the message's headers / properties / stream fields, as the broker's
        client library returns them.
    :param broker_ref: the broker's own reference of this delivery (delivery tag, stream entry
        id, stream sequence): for logs and metrics only, never a dedup key.
    :param key_error: why the value the message carries as its key is no key (an ``int``,
        bytes that are not UTF-8: :func:`sa_inbox.brokers.keys.read_key`); ``message_id`` is
        then None and the delivery is dead-lettered ``INVALID_MESSAGE_ID`` with this reason.
    """

    message_id: str | None
    body: bytes
    delivery_count: int = 1
    headers: Mapping[str, Any] = field(default_factory=dict)
    broker_ref: str = ""
    key_error: str | None = None


class DeadLetterReason(enum.StrEnum):
    """Why a delivery went to the dead-letter path instead of being processed."""

    #: The message carries no producer key (no ``message_id`` property / header / field).
    MISSING_MESSAGE_ID = "missing_message_id"
    #: The key is not a valid ``message_id`` (empty, too long, NUL, surrounding spaces: see
    #: :class:`~sa_inbox.exc.InvalidMessageId`), or not text (:attr:`Delivery.key_error`).
    INVALID_MESSAGE_ID = "invalid_message_id"
    #: The handler failed on the last delivery allowed (``max_deliveries``), or the broker
    #: delivered it more often than that (consumers died while handling it).
    DELIVERY_LIMIT = "delivery_limit"


class Disposition(enum.Enum):
    """How a delivery was settled with the broker."""

    #: The handler's change committed, then the delivery was acked.
    PROCESSED = "processed"
    #: An earlier delivery had committed it: acked without running the handler.
    DUPLICATE = "duplicate"
    #: The handler or the database failed: rolled back, handed back for redelivery.
    RETRY = "retry"
    #: Not processed: routed to the broker's dead-letter queue / stream, with a reason.
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True)
class Settlement:
    """The outcome of :func:`sa_inbox.brokers.process` for one delivery.

    :param disposition: what was done with the delivery.
    :param delivery: the delivery.
    :param reason: for :attr:`Disposition.DEAD_LETTERED`, why; else None.
    :param error: the handler's or database's exception for RETRY and a DELIVERY_LIMIT dead
        letter, the :class:`~sa_inbox.exc.InvalidMessageId` for INVALID_MESSAGE_ID; else None.
    """

    disposition: Disposition
    delivery: Delivery
    reason: DeadLetterReason | None = None
    error: BaseException | None = None


class Settler(Protocol):
    """A broker adapter's three ways to settle one delivery.

    Each method may be a plain function or an ``async def`` (the asyncio
    :func:`sa_inbox.brokers.process_async` awaits what it returns). An exception from any of
    them propagates to the adapter: the delivery is then unsettled and the broker redelivers
    it (after the consumer's connection or its visibility timeout ends), which is safe: a
    committed delivery comes back as a duplicate.
    """

    def ack(self) -> Awaitable[None] | None:
        """Acknowledge: the broker forgets the delivery."""

    def retry(self) -> Awaitable[None] | None:
        """Hand the delivery back for redelivery (requeue, ``nak``, or leave it pending)."""

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> Awaitable[None] | None:
        """Route the delivery to the dead-letter queue / stream and settle the original.

        :param reason: why.
        :param detail: a one-line human-readable explanation (stored with the dead letter
            where the broker allows: a header, a stream field).
        """
