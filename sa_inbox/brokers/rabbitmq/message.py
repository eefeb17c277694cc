"""AMQP message → :class:`~sa_inbox.brokers.Delivery`, and the dead letter's properties.

Shared by the pika (:mod:`.blocking`) and aio-pika (:mod:`.aio`) consumers: both read the same
AMQP fields (``message_id`` property, headers, ``redelivered`` flag, delivery tag), so the
mapping exists once and only the client calls differ.

**The delivery count.** What RabbitMQ 3.10 tells a consumer (verified on RabbitMQ 3.10.8):

- **quorum queues** add an ``x-delivery-count`` header to every *redelivery*: absent on the
  first delivery, ``1`` on the second, ``2`` on the third, counted both for
  ``basic.nack(requeue=True)`` and for messages returned because the consumer's channel or
  connection closed (a killed consumer). This is a real count: ``delivery_count`` is
  ``x-delivery-count + 1``. (RabbitMQ docs, "Quorum Queues", section "Poison Message
  Handling".)
- **classic queues** give only the ``redelivered`` flag (AMQP 0-9-1 ``basic.deliver``): "this
  message may have been delivered before", no count. ``delivery_count`` is then ``2`` for any
  redelivery, a lower bound, so ``max_deliveries`` above 2 is never reached and a poison
  message is retried for ever. **Use quorum queues** (:func:`~.queues.declare_queue` declares
  one).
- ``x-death`` is no delivery count: RabbitMQ adds it only when a message is *dead-lettered*
  through a dead-letter exchange (it counts trips through the DLX, e.g. TTL retry loops), and
  a ``nack`` with requeue leaves it out (verified: no headers on a requeued classic message).
  ("Dead Letter Exchanges", section "Dead-Lettered Messages".)

**The key** is the producer's: the AMQP ``message_id`` property by default, or a header the
user names. Never the delivery tag (per channel, changes on each delivery), kept in
``broker_ref`` for logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...exc import InvalidArgument
from ...exc import InvalidConsumerArgument as InvalidConsumerArgument
from ...validation import positive_int
from ..delivery import DeadLetterReason, Delivery
from ..keys import read_key

__all__ = [
    "COPIED_PROPERTIES",
    "DEAD_LETTER_SUFFIX",
    "DEFAULT_PREFETCH",
    "DELIVERY_COUNT_HEADER",
    "DETAIL_HEADER",
    "QUEUE_HEADER",
    "REASON_HEADER",
    "check_prefetch",
    "dead_letter_properties",
    "dead_letter_queue_name",
    "delivery_count",
    "producer_key",
    "to_delivery",
]

#: The quorum queue's redelivery counter header (absent on the first delivery).
DELIVERY_COUNT_HEADER = "x-delivery-count"
#: Headers added to a dead letter: why (a :class:`DeadLetterReason` value), the one-line
#: detail (the handler's error, the delivery count), and the queue it came from.
REASON_HEADER = "x-sa-inbox-reason"
DETAIL_HEADER = "x-sa-inbox-detail"
QUEUE_HEADER = "x-sa-inbox-queue"
#: ``dead_letter_queue_name(queue)`` is ``queue + DEAD_LETTER_SUFFIX`` unless named.
DEAD_LETTER_SUFFIX = ".dead-letter"

#: Unacked deliveries the broker sends one consumer ahead (``basic.qos`` prefetch count).
DEFAULT_PREFETCH = 10

#: Properties copied from the original message to its dead letter (both clients take these
#: keyword names: ``pika.BasicProperties`` and ``aio_pika.Message``).
COPIED_PROPERTIES = (
    "message_id",
    "correlation_id",
    "content_type",
    "content_encoding",
    "type",
    "app_id",
)


def dead_letter_queue_name(queue: str) -> str:
    """The default dead-letter queue of ``queue``: ``queue + ".dead-letter"``."""
    return queue + DEAD_LETTER_SUFFIX


def delivery_count(headers: Mapping[str, Any] | None, redelivered: bool) -> int:
    """Which delivery this is (1 for the first), from what RabbitMQ gives (see the module).

    :param headers: the message's headers (None when it has none).
    :param redelivered: the ``basic.deliver`` ``redelivered`` flag.
    :returns: ``x-delivery-count + 1`` (quorum queues); else ``2`` if redelivered (a lower
        bound: classic queues do not count), else ``1``.
    """
    count = (headers or {}).get(DELIVERY_COUNT_HEADER)
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count + 1
    return 2 if redelivered else 1


def producer_key(
    message_id: str | None, headers: Mapping[str, Any] | None, key_header: str | None
) -> str | None:
    """The producer's dedup key: header ``key_header`` if named, else the ``message_id``.

    :param message_id: the AMQP ``message_id`` property (None or ``""`` when unset).
    :param headers: the message's headers.
    :param key_header: the header holding the key, or None for the ``message_id`` property.
    :returns: the key as ``str`` (a ``bytes`` header decoded as UTF-8), or None when the
        message carries none, or a value that is no text (an ``int``, a ``float``...: see
        :func:`sa_inbox.brokers.keys.read_key`; :func:`to_delivery` says why). An unset
        ``message_id`` and an empty one are both "none": AMQP short strings cannot tell
        them apart.
    """
    return _read_key(message_id, headers, key_header)[0]


def _read_key(
    message_id: str | None, headers: Mapping[str, Any] | None, key_header: str | None
) -> tuple[str | None, str | None]:
    if key_header is None:
        return message_id or None, None
    return read_key((headers or {}).get(key_header))


def to_delivery(
    *,
    message_id: str | None,
    headers: Mapping[str, Any] | None,
    body: bytes,
    redelivered: bool,
    delivery_tag: int | None,
    key_header: str | None = None,
) -> Delivery:
    """The :class:`Delivery` of one AMQP message (either client's fields).

    :param message_id: the ``message_id`` property.
    :param headers: the headers table.
    :param body: the body.
    :param redelivered: the ``redelivered`` flag.
    :param delivery_tag: the channel's delivery tag (``broker_ref`` only).
    :param key_header: see :func:`producer_key`; a header value that is no text gives a
        delivery without a key and with its :attr:`~sa_inbox.brokers.Delivery.key_error`.
    """
    key, key_error = _read_key(message_id, headers, key_header)
    return Delivery(
        message_id=key,
        body=body,
        delivery_count=delivery_count(headers, redelivered),
        headers=dict(headers or {}),
        broker_ref=f"delivery tag {delivery_tag}",
        key_error=key_error,
    )


def dead_letter_properties(
    properties: Mapping[str, Any],
    headers: Mapping[str, Any] | None,
    *,
    queue: str,
    reason: DeadLetterReason,
    detail: str,
) -> dict[str, Any]:
    """The keyword arguments of the dead letter's properties (``pika.BasicProperties(**p)``,
    ``aio_pika.Message(body, **p)``): the original's identifying properties and headers, the
    reason headers, persistent (``delivery_mode=2``).

    :param properties: the original's properties by name (``message_id`` ...); others ignored.
    :param headers: the original's headers.
    :param queue: the queue the message was consumed from.
    :param reason: why it is dead-lettered.
    :param detail: the one-line detail (:func:`~sa_inbox.brokers.process` makes it).
    """
    copied = {
        name: properties[name] for name in COPIED_PROPERTIES if properties.get(name) is not None
    }
    marks = {REASON_HEADER: reason.value, DETAIL_HEADER: detail, QUEUE_HEADER: queue}
    return {**copied, "headers": {**(headers or {}), **marks}, "delivery_mode": 2}


def check_prefetch(prefetch: int) -> int:
    """``prefetch`` if it is a valid ``basic.qos`` prefetch count for a consumer.

    :raises InvalidArgument: if it is not an int >= 1 (0 would mean "unlimited" to
        RabbitMQ: "Consumer Prefetch").
    """
    return positive_int(prefetch, "prefetch", InvalidArgument)
