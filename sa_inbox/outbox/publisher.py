"""What a relay needs from a broker: publish one message and wait for the broker's confirm.

The broker packages provide one each: :class:`sa_inbox.brokers.rabbitmq.RabbitMQPublisher`
(pika, publisher confirms), :class:`sa_inbox.brokers.redis.RedisStreamPublisher` (``XADD``'s
reply), :class:`sa_inbox.brokers.nats.JetStreamPublisher` (the JetStream ``PubAck``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from .message import OutboxMessage

__all__ = ["Publisher"]


class Publisher(Protocol):
    """Publishes outbox messages to one broker, each confirmed before it returns.

    ``publish`` may be a plain method (for :class:`~sa_inbox.outbox.OutboxRelay`) or an
    ``async def`` (for :class:`~sa_inbox.outbox.AsyncOutboxRelay`, which awaits it).
    """

    def publish(self, message: OutboxMessage) -> Awaitable[None] | None:
        """Publish ``message`` to ``message.destination`` with ``message.message_id`` as the
        broker message's id; return only once the broker has confirmed that it stored it.

        :raises Exception: if the broker refused it, did not confirm it, or could not be
            reached: the relay retries the row after its back-off.
        """

    def close(self) -> Awaitable[None] | None:
        """Close the publisher's connection."""
