"""What a relay needs from a broker: publish one message and wait for the broker's confirm.

The broker packages provide one each: :class:`sa_inbox.brokers.rabbitmq.Publisher`
(pika, publisher confirms), :class:`sa_inbox.brokers.redis.Publisher` (``XADD``'s
reply), :class:`sa_inbox.brokers.nats.AsyncPublisher` (the JetStream ``PubAck``),
:class:`sa_inbox.brokers.sqs.Publisher` (``SendMessage``'s reply).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable
from typing import Any, Protocol

from .._optional import optional_dependencies
from ..brokers.schemes import BROKERS
from ..exc import AsyncPublisherInSyncRelay, InvalidObject, UnsupportedBroker
from ..handlers import is_async_callable
from .message import OutboxMessage

__all__ = [
    "SCHEMES",
    "Publisher",
    "async_publisher_for",
    "broker_unavailable",
    "check_broker",
    "check_publisher",
    "publisher_for",
]


class Publisher(Protocol):
    """Publishes outbox messages to one broker, each confirmed before it returns.

    ``publish`` may be a plain method (for :class:`~sa_inbox.outbox.OutboxRelay`) or an
    ``async def`` (for :class:`~sa_inbox.asyncio.AsyncOutboxRelay`, which awaits it). A
    publisher may also have ``publish_many(messages) -> list[Exception | None]`` (plain or
    ``async def``): it publishes a whole batch and waits for all confirms at once, and the
    relays call it instead of ``publish`` (see
    :class:`~sa_inbox.brokers.rabbitmq.AsyncPublisher`). And it may have
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


def check_publisher(publisher: object, *, asynchronous: bool) -> None:
    """Refuse, before any SQL, a publisher a relay cannot use.

    :param asynchronous: True for :class:`~sa_inbox.asyncio.AsyncOutboxRelay` (which awaits
        ``publish``, plain or ``async def``); False for the synchronous relay.
    :raises InvalidObject: if ``publisher`` has no callable ``publish``.
    :raises AsyncPublisherInSyncRelay: for the synchronous relay, if ``publish`` or
        ``publish_many`` is ``async def`` (a publisher returning awaitables from plain
        methods is refused at its first publish).
    """
    if not callable(getattr(publisher, "publish", None)):
        raise InvalidObject(
            f"a relay takes a publisher with a publish(message) method, not "
            f"{type(publisher).__name__} (see sa_inbox.outbox.publisher_for(url))"
        )
    methods = [getattr(publisher, name, None) for name in ("publish", "publish_many")]
    if not asynchronous and any(is_async_callable(method) for method in methods):
        raise AsyncPublisherInSyncRelay(
            f"the synchronous OutboxRelay was given {type(publisher).__name__}, whose publish "
            "is async def: run it with sa_inbox.asyncio.AsyncOutboxRelay on an AsyncEngine"
        )


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
SCHEMES = BROKERS


def _broker(url: str) -> str:
    """The broker of ``url``'s scheme (see :data:`SCHEMES`).

    :raises UnsupportedBroker: for any other scheme.
    """
    scheme = url.partition("://")[0].lower()
    broker = SCHEMES.get(scheme)
    if broker is None:
        raise UnsupportedBroker(
            f"no outbox publisher for {scheme!r}:// URLs; use one of {', '.join(sorted(SCHEMES))}"
        )
    return broker


def check_broker(url: str) -> str:
    """The broker of ``url``, once its adapter imports: a URL is refused before anything
    connects.

    :raises UnsupportedBroker: for an unknown scheme.
    :raises sa_inbox.exc.MissingExtra: if the broker's extra is not installed.
    """
    broker = _broker(url)
    importlib.import_module(f"sa_inbox.brokers.{broker}")
    return broker


def publisher_for(url: str) -> Publisher:
    """A synchronous publisher for a broker URL, for :class:`~sa_inbox.outbox.OutboxRelay`
    and ``sa-inbox relay`` on a sync driver's URL.

    ``amqp://``, ``amqps://``: :class:`~sa_inbox.brokers.rabbitmq.Publisher` on the
    default exchange; ``redis://``, ``rediss://``:
    :class:`~sa_inbox.brokers.redis.Publisher`; ``nats://``, ``tls://``:
    :class:`~sa_inbox.brokers.nats.Publisher` (connects at its first publish);
    ``kafka://host:port``: :class:`~sa_inbox.brokers.kafka.Publisher`.
    ``sqs://``, ``sqss://``: :class:`~sa_inbox.brokers.sqs.Publisher` (the destination is a
    queue name or URL; see :mod:`sa_inbox.brokers.sqs.url`).

    :raises UnsupportedBroker: for any other scheme (a :class:`ValueError`).
    :raises sa_inbox.exc.MissingExtra: (an ImportError) if the broker's extra is not installed.
    """
    broker = _broker(url)
    if broker == "rabbitmq":
        from ..brokers.rabbitmq import Publisher as RabbitPublisher

        return RabbitPublisher(url)
    if broker == "redis":
        from ..brokers.redis import Publisher as RedisPublisher

        with optional_dependencies(__name__, "redis", "redis"):
            import redis

        return RedisPublisher(redis.Redis.from_url(url))
    if broker == "kafka":
        from ..brokers.kafka import Publisher as KafkaPublisher

        return KafkaPublisher(url.partition("://")[2].rstrip("/"))
    if broker == "sqs":
        from ..brokers.sqs import Publisher as SqsPublisher
        from ..brokers.sqs import client_options

        with optional_dependencies(__name__, "sqs", "boto3"):
            import boto3

        return SqsPublisher(boto3.client("sqs", **client_options(url)))
    from ..brokers.nats import Publisher as NatsPublisher

    return NatsPublisher(url)


def async_publisher_for(url: str) -> Publisher:
    """An asyncio publisher for a broker URL, for :class:`~sa_inbox.asyncio.AsyncOutboxRelay`
    and ``sa-inbox relay`` on an async driver's URL; each connects at its first publish.

    ``amqp://``, ``amqps://``: :class:`~sa_inbox.brokers.rabbitmq.AsyncPublisher` on the
    default exchange; ``redis://``, ``rediss://``:
    :class:`~sa_inbox.brokers.redis.Publisher` on a ``redis.asyncio`` client;
    ``nats://``, ``tls://``: :class:`~sa_inbox.brokers.nats.ConnectingJetStreamPublisher`;
    ``sqs://``, ``sqss://``: :class:`~sa_inbox.brokers.sqs.AsyncPublisher`.

    :raises UnsupportedBroker: for any other scheme (a :class:`ValueError`).
    :raises ImportError: if the broker's client library (the extra) is not installed.
    """
    broker = _broker(url)
    if broker == "rabbitmq":
        from ..brokers.rabbitmq import AsyncPublisher as AsyncRabbitPublisher

        return AsyncRabbitPublisher(url)
    if broker == "redis":
        import redis.asyncio

        from ..brokers.redis import Publisher as RedisPublisher

        return RedisPublisher(redis.asyncio.Redis.from_url(url))
    if broker == "kafka":
        from ..brokers.kafka import AsyncPublisher as AsyncKafkaPublisher

        return AsyncKafkaPublisher(url.partition("://")[2].rstrip("/"))
    if broker == "sqs":
        from ..brokers.sqs import AsyncPublisher as AsyncSqsPublisher

        return AsyncSqsPublisher(url=url)
    from ..brokers.nats import ConnectingJetStreamPublisher

    return ConnectingJetStreamPublisher(url)
