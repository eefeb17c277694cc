"""The aio-pika consumer (asyncio): one delivery at a time, acked after commit.

.. code-block:: python

    consumer = AsyncConsumer(
        "amqp://guest:guest@localhost/",
        "payments",
        session_factory=async_sessionmaker(engine),
        inbox=inbox,
        consumer_name="billing",
        handler=apply_payment,  # async def handler(session, delivery); no commit
    )
    await consumer.run()  # until consumer.stop(), the stop event, or cancellation

**The producer must set** ``message_id``, the same one on every retry of a publish::

    await channel.default_exchange.publish(
        aio_pika.Message(body, message_id=payment_id), routing_key="payments"
    )

Without it, aio-pika's transport (aiormq's ``Channel.basic_publish``) **fills in a random
``message_id``** (verified with aio-pika 10.2.1 on RabbitMQ 3.10.8: a uuid4 hex), a new one
on each publish: a producer that retries a publish then sends two different keys, and both
are applied. Such a key dedups only the broker's redeliveries, never the producer's retries;
aio-pika producers can never send a message *without* a key (MISSING_MESSAGE_ID comes only
from other clients).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aio_pika
import aio_pika.exceptions
import aiormq.exceptions
from aio_pika.abc import AbstractIncomingMessage, AbstractQueueIterator

from ...claim import Inbox
from ...exc import DatabaseUnavailable
from ...outage import OutageGate
from ..delivery import DeadLetterReason, Delivery
from ..keys import flush_async, offer_async
from ..options import DeliveryOptions
from ..process import process_async
from ..reconnect import Reconnecting, Reconnects
from .consumer import DEFAULT_KEYLESS_WAIT, QueueConsumer, is_configuration_close
from .message import (
    COPIED_PROPERTIES,
    DEFAULT_PREFETCH,
    dead_letter_properties,
    to_delivery,
)
from .url import amqp_url

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["AioPikaSettler", "AsyncConsumer", "aio_pika_delivery"]

#: What :meth:`AsyncConsumer._next` returns when no message came in ``keyless_wait``.
_IDLE = object()


def aio_pika_delivery(message: AbstractIncomingMessage, key_header: str | None = None) -> Delivery:
    """The :class:`~sa_inbox.brokers.Delivery` of an aio-pika message (see :mod:`.message`)."""
    return to_delivery(
        message_id=message.message_id,
        headers=message.headers,
        body=message.body,
        redelivered=bool(message.redelivered),
        delivery_tag=message.delivery_tag,
        key_header=key_header,
    )


class AioPikaSettler:
    """Ack / retry / dead-letter one aio-pika message (a :class:`~sa_inbox.brokers.Settler`
    with ``async`` methods, for :func:`~sa_inbox.brokers.process_async`).

    :param message: the incoming message (consumed with ``no_ack=False``).
    :param channel: an aio-pika channel with publisher confirms (aio-pika's default) and
        ``on_return_raises=True``, to publish dead letters on.
    :param queue: the queue it was consumed from (stored in the dead letter).
    :param dead_letter_queue: where dead letters go.

    Dead letters are published (confirmed, ``mandatory``) to the dead-letter queue, then the
    original acked; why, and what a crash between the two steps does (a second copy, never
    none): :class:`~.blocking.PikaSettler`. A dead letter of a message without
    ``message_id`` gets aiormq's random one when published (see the module): its
    ``x-sa-inbox-reason`` header, ``missing_message_id``, is what says it had none.
    """

    def __init__(
        self,
        message: AbstractIncomingMessage,
        channel: aio_pika.abc.AbstractChannel,
        *,
        queue: str,
        dead_letter_queue: str,
    ) -> None:
        self.message = message
        self.channel = channel
        self.queue = queue
        self.dead_letter_queue = dead_letter_queue

    async def ack(self) -> None:
        """``basic.ack`` (after the commit)."""
        await self.message.ack()

    async def retry(self) -> None:
        """``basic.nack(requeue=True)``: redelivered, its ``x-delivery-count`` one more."""
        await self.message.nack(requeue=True)

    async def give_back(self) -> None:
        """Requeue it unprocessed: as :meth:`.blocking.PikaSettler.give_back`."""
        if not self.channel.is_closed:
            await self.retry()

    async def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        """Publish to the dead-letter queue with the reason headers, confirmed, then ack.

        :raises aio_pika.exceptions.DeliveryError: if the dead-letter queue does not exist
            (the original stays unacked: redelivered when the consumer stops).
        """
        message = self.message
        properties = dead_letter_properties(
            {name: getattr(message, name, None) for name in COPIED_PROPERTIES},
            message.headers,
            queue=self.queue,
            reason=reason,
            detail=detail,
        )
        await self.channel.default_exchange.publish(
            aio_pika.Message(message.body, **properties),
            routing_key=self.dead_letter_queue,
            mandatory=True,
        )
        await self.ack()


class AsyncConsumer(QueueConsumer, Reconnecting):
    """Consume a RabbitMQ queue with aio-pika, each message exactly once in effect.

    :class:`~.blocking.Consumer` on asyncio, through
    :func:`sa_inbox.brokers.process_async`: the same rules, arguments and broker guarantees
    (there), with an ``async_sessionmaker`` and an ``async def`` handler. Deliveries are
    handled one at a time, in order; ``prefetch`` bounds how many the broker sends ahead.
    Run several consumers (tasks or processes) for parallelism.

    :param url: an ``amqp://`` URL (``aio_pika.connect``).
    :param queue: the queue to consume (it must exist).
    :param session_factory: an ``async_sessionmaker``.
    :param handler: ``async def handler(session, delivery)`` (or a plain function); the
        business change, it must not commit.
    :param inbox: the :class:`~sa_inbox.Inbox`, or its :class:`~sa_inbox.asyncio.AsyncInbox`.
    :raises InvalidArgument: if ``prefetch`` is not an int >= 1.
    :raises ConfigurationError: when it is made, as :class:`~.blocking.Consumer`
        (here a ``sessionmaker`` is the other half's factory).

    ``prefetch``, ``keyless_wait``, ``options`` and ``consumer_name`` are as for
    :class:`~.blocking.Consumer`.

    **Readiness.** :meth:`run` first awaits :meth:`check`; await it from a health endpoint
    too.
    """

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        session_factory: Callable[[], AsyncSession],
        inbox: Inbox | Any,
        consumer_name: str,
        handler: Callable[[AsyncSession, Delivery], Awaitable[Any] | Any],
        prefetch: int = DEFAULT_PREFETCH,
        keyless_wait: float = DEFAULT_KEYLESS_WAIT,
        options: DeliveryOptions | None = None,
    ) -> None:
        super().__init__(
            queue,
            prefetch=prefetch,
            keyless_wait=keyless_wait,
            options=options,
            asynchronous=True,
            session_factory=session_factory,
            inbox=inbox,
            consumer_name=consumer_name,
            handler=handler,
        )
        self.url = amqp_url(url, "AsyncConsumer()")
        self._stop = asyncio.Event()
        self._extra_stop: asyncio.Event | None = None
        self.reconnects = Reconnects(f"RabbitMQ consumer of {queue}")
        self.process_options["outage"] = OutageGate(
            consumer_name, hooks=self.readiness.inbox.hooks, sleep=self._stopped_within
        )

    async def check(self) -> None:
        """Check the consumer can process messages (the inbox table exists, the session
        factory makes AsyncSessions, the engine is not autocommit, the handler fits);
        returns None or raises.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`.
        """
        await self.readiness.check_async()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Await :meth:`check`, then connect and consume until :meth:`stop` or ``stop`` is
        set (or the task is cancelled); the delivery in hand is finished first, then the
        connection closes and RabbitMQ requeues what was prefetched and not acked.

        A lost connection or channel is made again with back-off, as
        :meth:`.blocking.Consumer.run` does, in this loop rather than by aio-pika's
        ``connect_robust``: a robust connection restores its channel and consumer in the
        background, while the message in hand and the queue iterator still belong to the
        dead channel (its ack raises ``ChannelInvalidStateError``, the iterator ends); here
        one place sees the loss, drops what the dead channel held (RabbitMQ requeued it) and
        consumes again. While the database cannot be reached the delivery in hand is held
        unacked, uncounted (:mod:`sa_inbox.outage`).

        :param stop: an extra event that stops the consumer when set.
        :raises ConfigurationError: from :meth:`check`, before connecting; from
            :func:`~sa_inbox.brokers.process_async`, the delivery left unacked;
            :class:`~sa_inbox.exc.MissingKeyHeader` (see ``max_keyless``).
        :raises aio_pika.exceptions.AMQPException: for what no reconnect can mend: the
            queue does not exist (``ChannelNotFoundEntity``), access refused, a failed
            login; and when the first connection fails (a wrong URL, nothing listening).
        """
        self._extra_stop = stop
        if not await self.readiness.start_async(self.process_options["outage"]):
            return
        while not self._stopping():
            try:
                await self._consume(stop)
            except (DatabaseUnavailable, *_CONNECTION_ERRORS) as exc:
                if (seconds := self._wait_after(exc)) is None:
                    raise
                await self._stopped_within(seconds)

    def _connection_lost(self, exc: BaseException) -> bool:
        return not _fatal(exc)

    def _lost(self, exc: BaseException) -> float:
        self._streak.release()  # died with the channel: RabbitMQ requeued them
        return self.reconnects.failed(exc)

    async def _stopped_within(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if the consumer is stopped; whether it is."""
        events = [self._stop, *([self._extra_stop] if self._extra_stop is not None else [])]
        waits = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return self._stopping()

    async def _consume(self, stop: asyncio.Event | None) -> None:
        """One connection: consume until a stop or an error; closed after."""
        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel(on_return_raises=True)
            await channel.set_qos(prefetch_count=self.prefetch)
            queue = await channel.get_queue(self.queue, ensure=True)
            async with queue.iterator() as messages:
                self.reconnects.connected()
                # a run of keyless deliveries goes back with the channel (see the sync Consumer)
                self._streak.stop_deliveries = channel.close
                while (message := await self._next(messages, stop)) is not None:
                    if message is _IDLE:
                        await flush_async(self._streak, self._process)
                        continue
                    assert isinstance(message, AbstractIncomingMessage)
                    await self._offer(message, channel)
                    while self.holds_every_slot:  # read on past the prefetch count
                        got = await queue.get(no_ack=False, fail=False)
                        if got is None:  # the queue is empty: the run is short
                            await flush_async(self._streak, self._process)
                            break
                        await self._offer(got, channel)
                if not self._stopping():
                    raise _ChannelEnded("the queue iterator ended: the channel was closed")

    async def _offer(
        self, message: AbstractIncomingMessage, channel: aio_pika.abc.AbstractChannel
    ) -> None:
        settler = AioPikaSettler(
            message, channel, queue=self.queue, dead_letter_queue=self.dead_letter_queue
        )
        delivery = aio_pika_delivery(message, self.key_header)
        await offer_async(self._streak, delivery, settler, self._process)

    async def _process(self, delivery: Delivery, settler: AioPikaSettler) -> None:
        await process_async(delivery, settler, **self.process_options)

    def stop(self) -> None:
        """Stop after the current delivery (call on the consumer's event loop). A stopped
        consumer stays stopped: make a new one to consume again."""
        self._stop.set()

    async def _next(
        self, messages: AbstractQueueIterator, stop: asyncio.Event | None
    ) -> AbstractIncomingMessage | object | None:
        """The next message, None once a stop event is set, or :data:`_IDLE` when keyless
        deliveries are held and none came for ``keyless_wait`` seconds."""
        events = [self._stop, *([stop] if stop is not None else [])]
        waits = [asyncio.ensure_future(event.wait()) for event in events]
        get = asyncio.ensure_future(messages.__anext__())
        timeout = self.keyless_wait if self._streak.held else None
        try:
            await asyncio.wait([get, *waits], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            get.cancel()
            raise
        finally:
            for wait in waits:
                wait.cancel()
        if any(event.is_set() for event in events):
            get.cancel()  # a message got meanwhile stays unacked: requeued on close
            return None
        if not get.done():  # keyless_wait passed
            get.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await get
            if get.cancelled():
                return _IDLE
        try:
            return get.result()
        except StopAsyncIteration:  # the iterator was closed (with its channel)
            return None


class _ChannelEnded(ConnectionError):
    """The consumer's queue iterator ended without a stop: its channel was closed."""


#: What ends one connection of :meth:`AsyncConsumer.run` (:func:`_fatal` tells which of
#: them a reconnect mends).
_CONNECTION_ERRORS = (
    aiormq.exceptions.AMQPError,
    aiormq.exceptions.ChannelInvalidStateError,
    aio_pika.exceptions.AMQPException,
    OSError,
)


def _fatal(exc: BaseException) -> bool:
    """Whether no reconnect can mend ``exc``: a failed login, or a channel or connection
    closed for the consumer's own settings (see
    :func:`~.consumer.is_configuration_close`), or a dead letter the broker could not route
    (``DeliveryError``: the dead-letter queue does not exist)."""
    if isinstance(
        exc, aiormq.exceptions.ProbableAuthenticationError | aiormq.exceptions.DeliveryError
    ):
        return True
    code = getattr(exc, "code", None)
    if code is None and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    return is_configuration_close(code)
