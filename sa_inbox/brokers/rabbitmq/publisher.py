"""The outbox relay's RabbitMQ publisher: pika, publisher confirms, the outbox's message_id.

RabbitMQ rules relied on ("Consumer Acknowledgements and Publisher Confirms", sections
"Publisher Confirms" and "When Will Published Messages Be Confirmed by the Broker?"): on a
channel in confirm mode (``confirm.select``, pika's ``channel.confirm_delivery()``) the broker
confirms a persistent message routed to a durable (quorum) queue once the queue has it
(written to a quorum of replicas for a quorum queue); a message that cannot be routed is
returned before its confirm when published ``mandatory``. pika's ``BlockingChannel`` then
makes ``basic_publish`` wait for the confirm and raise ``UnroutableError`` (returned) or
``NackError`` (``basic.nack``: the broker could not take it).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pika
import pika.exceptions

from ...outbox.message import OutboxMessage
from .url import amqp_url, connection_parameters

__all__ = ["DEFAULT_TIMEOUT", "AsyncPublisher", "Publisher"]

#: Seconds :class:`AsyncPublisher` waits for the connection, and for a batch's confirms.
DEFAULT_TIMEOUT = 10.0


class Publisher:
    """Publishes outbox messages with pika, each confirmed (an outbox
    :class:`~sa_inbox.outbox.publisher.Publisher`).

    Each message is published ``persistent`` (``delivery_mode=2``) and ``mandatory`` to
    ``exchange`` with the routing key ``message.destination`` (the default exchange ``""``
    routes it to the queue of that name), with the AMQP ``message_id`` property set to the
    outbox's ``message_id``: the key :class:`~sa_inbox.brokers.rabbitmq.Consumer`
    deduplicates on. The outbox headers go into the AMQP headers table.

    :param parameters: an ``amqp://`` URL or ``pika.ConnectionParameters``.
    :param exchange: the exchange to publish to; default the default exchange.
    :param key_header: also put the message_id in this header (for consumers configured with
        ``key_header``); None (default): the ``message_id`` property only.

    Not thread-safe (one pika connection): use one publisher per thread / relay. A
    connection error closes the connection; the next ``publish`` reconnects.
    """

    def __init__(
        self,
        parameters: str | pika.ConnectionParameters,
        *,
        exchange: str = "",
        key_header: str | None = None,
    ) -> None:
        self.parameters = connection_parameters(parameters, "Publisher()")
        self.exchange = exchange
        self.key_header = key_header
        self._connection: Any = None
        self._channel: Any = None

    def publish(self, message: OutboxMessage) -> None:
        """Publish ``message`` and wait for the broker's confirm.

        :raises pika.exceptions.UnroutableError: no queue is bound for the destination.
        :raises pika.exceptions.NackError: the broker nacked it.
        :raises pika.exceptions.AMQPError: the connection or channel failed (closed here;
            the next call reconnects).
        """
        channel = self._open()
        headers = dict(message.headers)
        if self.key_header is not None:
            headers[self.key_header] = message.message_id
        properties = pika.BasicProperties(
            message_id=message.message_id, headers=headers or None, delivery_mode=2
        )
        try:
            channel.basic_publish(
                self.exchange, message.destination, message.payload, properties, mandatory=True
            )
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError):
            raise  # the message's fault, the channel is fine
        except pika.exceptions.AMQPError:
            self.close()
            raise

    def connect(self) -> None:
        """Open the connection and the confirm-mode channel now (else the first publish does).

        :raises pika.exceptions.AMQPError: if the broker cannot be reached.
        """
        self._open()

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether ``error`` says the broker could not be reached: a connection error
        (``pika.exceptions.AMQPConnectionError``: refused, lost, heartbeat timeout, login
        refused) or a socket error. A channel error (unroutable, nacked, a missing exchange)
        is the message's. See :func:`sa_inbox.outbox.publisher.broker_unavailable`."""
        return isinstance(error, (pika.exceptions.AMQPConnectionError, OSError))

    def close(self) -> None:
        """Close the connection (if open)."""
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                connection.close()

    def _open(self) -> Any:
        if self._channel is None or not self._channel.is_open:
            self.close()
            self._connection = pika.BlockingConnection(self.parameters)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel


class AsyncPublisher:
    """The asyncio RabbitMQ publisher (aio-pika), confirms pipelined: for
    :class:`~sa_inbox.asyncio.AsyncOutboxRelay`.

    The same message as :class:`Publisher` (persistent, ``mandatory``, the AMQP
    ``message_id`` = the outbox's), on a channel with publisher confirms and
    ``on_return_raises=True``. :meth:`publish_many` sends a whole batch before waiting, then
    waits for every confirm, instead of one round trip per message; RabbitMQ keeps the
    channel's publish order in each queue ("Consumer Acknowledgements and Publisher
    Confirms", section "Publisher Confirms"; AMQP 0-9-1 message ordering per channel).

    :param url: an ``amqp://`` URL.
    :param exchange: the exchange's name; default the default exchange.
    :param key_header: as :class:`Publisher`.
    :param timeout: seconds to wait for the connection to open, and for a batch's confirms
        (aio-pika waits for ever by default): a broker that accepts the connection but does
        not answer then counts as unreachable (``TimeoutError``, an ``OSError``) well
        within the relay's ``visibility_timeout``, instead of holding the claimed rows until
        another relay takes them over and counts an attempt.
    """

    def __init__(
        self,
        url: str,
        *,
        exchange: str = "",
        key_header: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.url = amqp_url(url, "AsyncPublisher()")
        self.exchange_name = exchange
        self.key_header = key_header
        self.timeout = timeout
        self._connection: Any = None
        self._exchange: Any = None

    async def connect(self) -> None:
        """Open the connection and the confirm-mode channel now (else the first publish does).

        :raises aiormq.exceptions.AMQPError: if the broker cannot be reached.
        """
        await self._open()

    async def publish(self, message: OutboxMessage) -> None:
        """Publish ``message`` and await its confirm.

        :raises aio_pika.exceptions.DeliveryError: returned unroutable (its subclass
            ``PublishError``, reply ``NO_ROUTE``), or nacked.
        :raises aiormq.exceptions.AMQPError: the connection or channel failed (closed here;
            the next call reconnects).
        """
        (outcome,) = await self.publish_many([message])
        if outcome is not None:
            raise outcome

    async def publish_many(self, messages: list[OutboxMessage]) -> list[BaseException | None]:
        """Publish every message, then await all their confirms.

        :returns: per message, in order, None (confirmed) or the exception that refused it
            (``DeliveryError``, or the channel's error: then the connection is closed and the
            next call reconnects).
        """
        import aio_pika

        exchange = await self._open()
        sends = [
            exchange.publish(
                aio_pika.Message(
                    message.payload,
                    message_id=message.message_id,
                    headers=self._headers(message) or None,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                ),
                routing_key=message.destination,
                mandatory=True,
                timeout=self.timeout,
            )
            for message in messages
        ]
        results = await asyncio.gather(*sends, return_exceptions=True)
        outcomes = [r if isinstance(r, BaseException) else None for r in results]
        if any(o is not None and not _refused(o) for o in outcomes):
            await self.close()  # a channel or connection error: reconnect next time
        return outcomes

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether ``error`` says the broker could not be reached: a socket error, which
        includes aiormq's ``AMQPConnectionError`` (refused, lost, closed by the broker), or
        aiormq's ``ChannelInvalidStateError``: the channel was closed before this message
        was sent, so the broker never saw it (a connection lost mid-batch: the messages
        awaiting their confirm get the ``AMQPConnectionError``, those :meth:`publish_many`
        had not sent yet this error). A ``DeliveryError`` (returned or nacked) and the
        error that closed the channel are the message's. See
        :func:`sa_inbox.outbox.publisher.broker_unavailable`."""
        from aiormq.exceptions import ChannelInvalidStateError

        return isinstance(error, (OSError, ChannelInvalidStateError))

    async def close(self) -> None:
        """Close the connection (if open)."""
        connection, self._connection, self._exchange = self._connection, None, None
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await connection.close()

    def _headers(self, message: OutboxMessage) -> dict[str, Any]:
        headers: dict[str, Any] = dict(message.headers)
        if self.key_header is not None:
            headers[self.key_header] = message.message_id
        return headers

    async def _open(self) -> Any:
        import aio_pika

        if self._exchange is None or self._connection is None or self._connection.is_closed:
            await self.close()
            async with asyncio.timeout(self.timeout):  # TimeoutError: the broker is unreachable
                self._connection = await aio_pika.connect(self.url, timeout=self.timeout)
                channel = await self._connection.channel(
                    publisher_confirms=True, on_return_raises=True
                )
                self._exchange = (
                    channel.default_exchange
                    if not self.exchange_name
                    else await channel.get_exchange(self.exchange_name)
                )
        return self._exchange


def _refused(error: BaseException) -> bool:
    """The broker refused this message (returned or nacked); the channel is fine."""
    from aio_pika.exceptions import DeliveryError

    return isinstance(error, DeliveryError)
