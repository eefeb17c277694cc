"""What a relay needs from a broker: publish one message and wait for the broker's confirm.

The broker packages provide one each: :class:`sa_inbox.brokers.rabbitmq.RabbitMQPublisher`
(pika, publisher confirms), :class:`sa_inbox.brokers.redis.RedisStreamPublisher` (``XADD``'s
reply), :class:`sa_inbox.brokers.nats.JetStreamPublisher` (the JetStream ``PubAck``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from .._optional import optional_dependencies
from ..exc import UnsupportedBroker
from .message import OutboxMessage

__all__ = ["SCHEMES", "Publisher", "broker_unavailable", "publisher_for"]


class Publisher(Protocol):
    """Publishes outbox messages to one broker, each confirmed before it returns.

    ``publish`` may be a plain method (for :class:`~sa_inbox.outbox.OutboxRelay`) or an
    ``async def`` (for :class:`~sa_inbox.asyncio.AsyncOutboxRelay`, which awaits it). A
    publisher may also have ``publish_many(messages) -> list[Exception | None]`` (plain or
    ``async def``): it publishes a whole batch and waits for all confirms at once, and the
    relays call it instead of ``publish`` (see
    :class:`~sa_inbox.brokers.rabbitmq.AioPikaPublisher`). And it may have
    ``is_unavailable(error) -> bool``, which tells a broker that could not be reached from a
    message the broker refused (see :func:`broker_unavailable`); every publisher of
    ``sa_inbox.brokers`` has one.
    """

    def publish(self, message: OutboxMessage) -> Awaitable[None] | None:
        """Publish ``message`` to ``message.destination`` with ``message.message_id`` as the
        broker message's id; return only once the broker has confirmed that it stored it.

        :raises Exception: if the broker refused it, did not confirm it, or could not be
            reached: the relay retries a refused row after its back-off (an attempt) and
            gives back, without counting an attempt, the rows of a broker that could not
            be reached (:func:`broker_unavailable`).
        """

    def close(self) -> Awaitable[None] | None:
        """Close the publisher's connection."""


def broker_unavailable(publisher: Any, error: BaseException) -> bool:
    """Whether ``error``, raised by ``publisher``'s publish, says the broker could not be
    reached rather than that it refused the message.

    A relay counts no attempt for such an error: it gives the rows back unpublished and
    waits before its next claim (see :mod:`sa_inbox.outbox.relay`). The publisher's own
    ``is_unavailable(error)`` decides when it has one (each client library has its own
    connection errors); otherwise an :class:`OSError` (refused, reset, timed out, a name
    that does not resolve) counts as unavailable and anything else as refused.

    :param publisher: the relay's publisher.
    :param error: the exception its ``publish`` (or ``publish_many``) raised or returned.
    :returns: True if the broker was unavailable.
    """
    decide = getattr(publisher, "is_unavailable", None)
    if decide is not None:
        return bool(decide(error))
    return isinstance(error, OSError)


#: The publisher for each broker URL scheme (see :func:`publisher_for`).
SCHEMES = {
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "redis": "redis",
    "rediss": "redis",
    "nats": "nats",
    "tls": "nats",
}


def publisher_for(url: str) -> Publisher:
    """A synchronous publisher for a broker URL, for :class:`~sa_inbox.outbox.OutboxRelay`
    and ``sa-inbox relay``.

    ``amqp://``, ``amqps://``: :class:`~sa_inbox.brokers.rabbitmq.RabbitMQPublisher` on the
    default exchange; ``redis://``, ``rediss://``:
    :class:`~sa_inbox.brokers.redis.RedisStreamPublisher`; ``nats://``, ``tls://``:
    :class:`~sa_inbox.brokers.nats.BlockingJetStreamPublisher` (connects at its first publish).

    :raises UnsupportedBroker: for any other scheme (a :class:`ValueError`).
    :raises sa_inbox.exc.MissingExtra: (an ImportError) if the broker's extra is not installed.
    """
    scheme = url.partition("://")[0].lower()
    broker = SCHEMES.get(scheme)
    if broker is None:
        raise UnsupportedBroker(
            f"no outbox publisher for {scheme!r}:// URLs; use one of {', '.join(sorted(SCHEMES))}"
        )
    if broker == "rabbitmq":
        from ..brokers.rabbitmq import RabbitMQPublisher

        return RabbitMQPublisher(url)
    if broker == "redis":
        from ..brokers.redis import RedisStreamPublisher

        with optional_dependencies(__name__, "redis", "redis"):
            import redis

        return RedisStreamPublisher(redis.Redis.from_url(url))
    from ..brokers.nats import BlockingJetStreamPublisher

    return BlockingJetStreamPublisher(url)
