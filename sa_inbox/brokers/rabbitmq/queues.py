"""Declare a queue the recommended way: a quorum queue with its dead-letter queue.

Quorum queues count redeliveries (``x-delivery-count``, see :mod:`.message`), which
``max_deliveries`` needs; classic queues do not. The queue's ``x-dead-letter-exchange`` is
the default exchange and its ``x-dead-letter-routing-key`` the dead-letter queue, so what
the *broker* dead-letters (a ``basic.reject`` without requeue, an ``x-delivery-limit`` if you
set one) lands in the same queue as the consumers' dead letters (RabbitMQ docs, "Dead Letter
Exchanges", section "Configuration Using Optional Queue Arguments"; "Quorum Queues", section
"Poison Message Handling").

Declaring is idempotent: declaring again with the same arguments is a no-op, with other
arguments the broker refuses it (``PRECONDITION_FAILED``, the channel is closed).
"""

from __future__ import annotations

from typing import Any

from .message import dead_letter_queue_name

__all__ = ["declare_queue", "declare_queue_async", "queue_arguments"]


def queue_arguments(dead_letter_queue: str, *, delivery_limit: int | None = None) -> dict[str, Any]:
    """The ``arguments`` of the consumed queue: quorum, dead letters to ``dead_letter_queue``.

    :param dead_letter_queue: the dead-letter queue's name.
    :param delivery_limit: the broker's own ``x-delivery-limit`` (redeliveries after which
        RabbitMQ dead-letters the message by itself, without the reason headers), or None
        (the default): the consumers' ``max_deliveries`` decides, with the reason.
    """
    arguments: dict[str, Any] = {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dead_letter_queue,
    }
    if delivery_limit is not None:
        arguments["x-delivery-limit"] = delivery_limit
    return arguments


def declare_queue(
    channel: Any,
    queue: str,
    *,
    dead_letter_queue: str | None = None,
    delivery_limit: int | None = None,
) -> str:
    """Declare durable quorum queue ``queue`` and its dead-letter queue, on a pika channel.

    :param channel: a ``pika.adapters.blocking_connection.BlockingChannel``.
    :param queue: the queue's name.
    :param dead_letter_queue: its dead-letter queue's name; default
        :func:`~.message.dead_letter_queue_name`.
    :param delivery_limit: see :func:`queue_arguments`.
    :returns: the dead-letter queue's name.
    :raises pika.exceptions.ChannelClosedByBroker: if a queue exists with other arguments.
    """
    dead = dead_letter_queue or dead_letter_queue_name(queue)
    channel.queue_declare(dead, durable=True, arguments={"x-queue-type": "quorum"})
    arguments = queue_arguments(dead, delivery_limit=delivery_limit)
    channel.queue_declare(queue, durable=True, arguments=arguments)
    return dead


async def declare_queue_async(
    channel: Any,
    queue: str,
    *,
    dead_letter_queue: str | None = None,
    delivery_limit: int | None = None,
) -> str:
    """:func:`declare_queue` on an ``aio_pika`` channel.

    :raises aiormq.exceptions.ChannelPreconditionFailed: if a queue exists with other
        arguments.
    """
    dead = dead_letter_queue or dead_letter_queue_name(queue)
    await channel.declare_queue(dead, durable=True, arguments={"x-queue-type": "quorum"})
    arguments = queue_arguments(dead, delivery_limit=delivery_limit)
    await channel.declare_queue(queue, durable=True, arguments=arguments)
    return dead
