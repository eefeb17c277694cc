"""A FastStream middleware: consume exactly once from its RabbitMQ, Redis Streams, NATS
JetStream and Kafka brokers (Kafka: ``InboxMiddleware(..., kafka=True)``, see "Kafka" below).

:class:`InboxMiddleware` runs each delivery of a subscriber through
:func:`sa_inbox.brokers.process_async`: the claim ``(key, consumer_name)`` is inserted in the
same transaction as the handler's change, the transaction commits, and only then is the
message acked. A redelivery of a committed message is acked without running the handler.

The handler gets the transaction's :class:`~sqlalchemy.ext.asyncio.AsyncSession` from
FastStream's context (``Context("inbox_session")``, set with ``context.scope()`` around the
handler: the way FastStream hands per-message objects such as ``message`` to handlers;
FastStream docs, "Context" → "Existing Fields" and "Custom Context"), and must not commit
it::

    from faststream import AckPolicy, Context, FastStream
    from faststream.rabbit import RabbitBroker
    from sa_inbox.brokers.faststream import InboxMiddleware

    inbox_mw = InboxMiddleware(
        session_factory=async_sessionmaker(engine), inbox=inbox, consumer_name="billing"
    )
    broker = RabbitBroker(url, middlewares=[inbox_mw])

    @broker.subscriber("payments", ack_policy=AckPolicy.MANUAL)
    async def pay(
        body: dict, session: Annotated[AsyncSession, Context("inbox_session")]
    ) -> None:
        await session.execute(...)  # committed with the claim, then acked

    # the producer sets the key: retries of one payment publish the same key
    await broker.publish(payment, "payments", headers={"idempotency-key": payment_id})

    app = FastStream(broker)
    app.on_startup(inbox_mw.check)  # fails the start if the table or the engine is wrong

**The subscriber's handler owns the consumer name** (:mod:`sa_inbox.consumers`): the
function decorated with ``@broker.subscriber``, by its ``module.qualname``; two subscribers
under one ``consumer_name`` are refused with :class:`~sa_inbox.exc.ConsumerNameTaken`;
:func:`sa_inbox.consumers.owned_as` names the owner otherwise (``@broker.subscriber(...)``
above ``@owned_as("billing.pay")``).

The middleware checks its objects when made and, in ``check()``, the database (see
:meth:`InboxMiddleware.check`).

**A misspelled key header stops the subscriber** (the rule of
:mod:`sa_inbox.brokers.keys`, as far as FastStream allows). The run counts every keyless
message since the last keyed one, however far apart. FastStream hands the middleware one
message at a time and waits for it to be settled, so a keyless message cannot be held while
the next shows whether a run has begun (the other adapters hold them): each of the first
``max_keyless - 1`` of a run is dead-lettered at once, as the producer's. The
``max_keyless``-th is given back (nacked: requeued on RabbitMQ and NATS, left pending on
Redis) and the subscriber that got it stops consuming (FastStream's ``StopConsume``: no
middleware can make ``FastStream.run()`` raise); the
:class:`~sa_inbox.exc.MissingKeyHeader` is logged (ERROR, ``inbox.key.missing``) and raised
by :meth:`InboxMiddleware.check` from then on, so a readiness probe fails. Every other
subscriber of the middleware stops at its next keyless message.

**The key is a header the producer sets** (``options.key_source``, ``"idempotency-key"`` by
default), the same on all four brokers. FastStream's own ``message_id`` cannot be the key:
when the producer sets none, FastStream fills in a random one on the consumer side
(``StreamMessage.__init__``: ``message_id or correlation_id``, and ``correlation_id or
uuid4()``; the RabbitMQ parser: ``message.message_id or gen_cor_id()``; the Redis parser:
``headers.get("message_id", gen_cor_id())``), which differs between two publishes of one
payment and dedups nothing. Its Redis and NATS ``publish()`` take no ``message_id`` at all;
RabbitMQ's does (the AMQP property), and the producer may put the same value in the header.
On Kafka FastStream's ``message_id`` is the record's coordinates (the Kafka parser:
``f"{message.offset}-{message.timestamp}"``), which change with every copy of a message.
A message without the header is rejected (the dead-letter path below), never processed.

What each broker does on FastStream's ``ack`` / ``nack`` / ``reject`` (FastStream docs,
"Acknowledgement"; the brokers' docs named):

* **RabbitMQ**: ``basic.ack``; ``basic.nack(requeue=True)`` (redelivered at once);
  ``basic.reject(requeue=False)``, which routes the message to the queue's dead-letter exchange
  when the queue has one (``x-dead-letter-exchange``, RabbitMQ docs "Dead Letter Exchanges"),
  and drops it otherwise. The delivery count is the quorum queue's ``x-delivery-count`` header
  + 1 (RabbitMQ docs "Quorum Queues" → "Poison Message Handling"); a classic queue only has the
  ``redelivered`` flag (counted as 2), so a poison message on a classic queue is requeued
  forever unless ``max_deliveries`` <= 2: use a quorum queue.
* **Redis Streams** (a ``StreamSub`` with a group and a consumer): ``XACK``; ``nack`` and
  ``reject`` leave the entry pending. So a retry is picked up by a subscriber with
  ``StreamSub(min_idle_time=...)`` (``XAUTOCLAIM``, Redis docs "XAUTOCLAIM"), and a dead letter
  is ``XADD``\\ ed to the stream ``<stream><dead_letter_suffix>`` (default ``<stream>:dead``,
  as the Redis adapter's) with its reason and ``XACK``\\ ed, atomically (the adapter's script).
  The delivery count is ``XPENDING``'s ``times_delivered``.
* **NATS JetStream**: ``+ACK``; ``-NAK`` (redelivered at once); ``+TERM`` (never redelivered;
  the server publishes ``$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>`` with
  the message's ``stream_seq``). JetStream has no dead-letter stream: keep a stream on that
  advisory subject and read the original by ``stream_seq`` (NATS docs "Consumers" → dead
  letter queues, and "Advisories" → "Message Terminated"); this needs ``limits`` retention,
  as a ``workqueue`` stream deletes a terminated message. The delivery count is the message
  metadata's ``num_delivered``.

* **Kafka** (``faststream.kafka.KafkaBroker``; a subscriber with a ``group_id``, one
  message at a time; ``faststream/kafka/message.py``, ``KafkaAckableMessage``): ``ack`` is
  ``await consumer.commit()``, aiokafka's commit without offsets, which commits the
  consumer's position in each partition assigned to it (past every record ``getone()``
  returned); ``nack`` seeks the record's partition back to its offset
  (``consumer.seek(tp, offset)``: the next ``getone()`` fetches it again, nothing committed);
  ``reject`` is ``ack`` (the offset committed: FastStream has no Kafka dead-letter topic).
  With ``ACK_FIRST`` FastStream makes a ``KafkaMessage``, settled from the start, and turns on
  aiokafka's ``enable_auto_commit``. Kafka keeps no delivery count: see "Kafka" below.

Use any ``ack_policy`` except ``AckPolicy.ACK_FIRST`` (which acks before the handler runs, so a
crash loses the message; it is refused): the middleware settles every message itself, after
the commit, and FastStream's own acknowledgement then finds the message settled and does
nothing (``StreamMessage.committed``). ``AckPolicy.MANUAL`` is the clearest. Batch
subscribers are refused (one claim per message).

**Kafka** (``InboxMiddleware(..., kafka=True)``; ``pip install 'sa-inbox[faststream,kafka]'``).
The middleware does what the project's Kafka adapter (:mod:`sa_inbox.brokers.kafka`) does,
through FastStream's ``ack`` and ``nack`` above, one record at a time
(``sa_inbox.brokers.kafka.faststream``):

* processed or a duplicate: the claim and the handler's change commit in one transaction,
  then ``ack`` commits the offset. FastStream settles one record before it fetches the next
  (per aiokafka consumer; ``max_workers`` > 1 gives each worker a consumer of its own), so
  the position ``ack`` commits passes no record still in hand;
* failed: the attempt is written to ``inbox_kafka_attempts`` (the adapter's table and
  statements: make it with :func:`sa_inbox.brokers.kafka.kafka_tables` on the inbox's
  MetaData before ``create_all``), then ``nack`` seeks back to the record, fetched again at
  once. The record's delivery count is its failed attempts plus one (read before its claim);
  its row is deleted in the transaction that processes it;
* at ``max_deliveries`` (or without a valid key): published to the dead-letter topic (the
  adapter's: ``<topic>.dead`` unless ``options.dead_letter`` names one, the original's value,
  Kafka key and headers plus the adapter's ``sa-inbox-*`` headers,
  :func:`sa_inbox.brokers.kafka.dead_letter_headers`) through the ``KafkaBroker``'s own
  producer, awaiting the broker's acknowledgement, then ``ack``: the partition goes on;
* the key is the ``options.key_source`` header (the last one of that name), as on every
  broker; names of a record's coordinates (``offset``, ``partition``...) are refused;
* a record that cannot be settled (a :class:`~sa_inbox.exc.ConfigurationError` of the run,
  the consumer stopped during a database outage, a lost connection) is sought back before the
  error goes on: left unsettled, the next record's ``ack`` would commit past it. A
  ConfigurationError, which would fail every record, also stops the subscriber as the run of
  keyless messages does (its aiokafka consumer stopped, the error logged and raised by
  :meth:`InboxMiddleware.check`).

Refused (a :class:`~sa_inbox.exc.ConfigurationError` when the record arrives, nothing
processed): a subscriber without ``group_id`` (its ``ack`` cannot commit: aiokafka raises
``IllegalOperation``), batch subscribers, ``ACK_FIRST``, and a Kafka record at a middleware
made without ``kafka=True`` (it would have no delivery count). ``check()`` raises
:class:`~sa_inbox.exc.MissingTable` while ``inbox_kafka_attempts`` is missing.

The handler's return value is published (to ``reply_to`` and the ``@publisher`` decorators) only by
the delivery that processed the message: a duplicate, a retried or a dead-lettered delivery
ends in FastStream's ``SkipMessage``, so nothing is published for it (the inbox keeps no
results to replay; an RPC caller of a duplicate gets no reply).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._compat import faststream_handler
from .._optional import optional_dependencies
from ..claim import Inbox
from ..consumers import stands_for
from ..exc import ConfigurationError, InvalidArgument
from .delivery import DeadLetterReason, Delivery, Disposition
from .keys import KeylessStreak, read_key
from .options import DeliveryOptions, options_of
from .process import Options, process_async
from .startup import NO_HANDLER, Readiness, check_consumer

with optional_dependencies(__name__, "faststream", "faststream"):
    from faststream import BaseMiddleware, ContextRepo, StreamMessage
    from faststream.exceptions import SkipMessage, StopConsume

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from .kafka.faststream import KafkaSide
    from .kafka.records import Record

__all__ = [
    "DEFAULT_DEAD_LETTER_SUFFIX",
    "DEFAULT_KEY_HEADER",
    "SESSION_CONTEXT_KEY",
    "InboxMiddleware",
    "delivery_of",
]

logger = logging.getLogger(__name__)

#: The header carrying the producer's idempotency key, unless ``options.key_source`` names
#: another.
DEFAULT_KEY_HEADER = "idempotency-key"
#: Why the middleware refuses ``DeliveryOptions.retry_delay``: a failed message is nacked
#: for its broker to redeliver at once (FastStream's ``nack()``).
NO_RETRY_DELAY = "a failed message is nacked for its broker to redeliver at once"
#: The FastStream context name of the transaction's AsyncSession.
SESSION_CONTEXT_KEY = "inbox_session"
#: Appended to a Redis stream's name for its dead-letter stream.
DEFAULT_DEAD_LETTER_SUFFIX = ":dead"  # as the Redis adapter's default


class InboxMiddleware:
    """FastStream middleware factory: each subscribed message is processed exactly once.

    Pass it in ``middlewares=[...]`` of a ``RabbitBroker``, ``RedisBroker``, ``NatsBroker``
    (JetStream subscribers) or ``KafkaBroker`` (``kafka=True``), or of a router. See the
    module's docstring for the example and for what each broker does.

    :param session_factory: an :class:`~sqlalchemy.ext.asyncio.async_sessionmaker`.
    :param inbox: the inbox to claim in.
    :param consumer_name: this consumer's name (``str``; the claim is per consumer).
    :param context_key: the FastStream context name the AsyncSession is set under.
    :param dead_letter_suffix: Redis Streams only: the dead-letter stream is the stream's
        name plus this.
    :param kafka: serve a ``KafkaBroker``: failed attempts counted in
        ``inbox_kafka_attempts``, checked by :meth:`check` (see the module's docstring,
        "Kafka"); needs the ``kafka`` extra.
    :param options: the settings every consumer shares
        (:class:`~sa_inbox.brokers.DeliveryOptions`): ``key_source``, the header holding the
        producer's key; ``max_deliveries`` (:func:`sa_inbox.brokers.process_async`'s rules);
        ``max_keyless`` (see the module's docstring); ``on_settled``; ``dead_letter``, with
        ``kafka=True`` only, the dead-letter topic of every record (default
        ``<topic>.dead``). ``retry_delay`` is refused: a failed message is nacked for the
        broker to redeliver at once.
    :raises ConfigurationError: when it is made, for a session factory of the sync half or
        ``async_sessionmaker.begin`` (:class:`~sa_inbox.exc.InvalidSessionFactory`), an inbox
        that is neither an Inbox nor an AsyncInbox (:class:`~sa_inbox.exc.InvalidObject`),
        ``options`` that are not a DeliveryOptions or set ``retry_delay``
        (:class:`~sa_inbox.exc.InvalidArgument`); with ``kafka=True``, a ``key_source``
        naming a record's coordinates (:class:`~sa_inbox.exc.InvalidArgument`; a
        ``dead_letter`` without ``kafka=True`` too).

    **Outages and reconnects.** While the database cannot be reached each message in hand is
    held in its handler, unsettled and uncounted, while one
    :class:`~sa_inbox.outage.OutageGate` of the middleware probes the database with back-off
    (one WARNING, one INFO per outage, for all the messages FastStream runs at once); FastStream
    takes no more than its subscriber's prefetch meanwhile. The broker connection is
    FastStream's to make again (aio-pika's ``connect_robust`` for RabbitMQ, redis-py's pool,
    nats-py's reconnect, aiokafka's): a message whose ack was lost with it comes back, as a
    duplicate.

    On a message it raises :class:`~sa_inbox.ConfigurationError` (to FastStream, which logs
    it and applies the subscriber's ``ack_policy``: with ``AckPolicy.MANUAL`` the message is
    left unsettled and redelivered when the consumer stops) for a batch message, a message
    acknowledged before the handler ran (``AckPolicy.ACK_FIRST``, core NATS), and the
    runner's configuration errors (see :func:`sa_inbox.asyncio.handle`); on Kafka also for a
    subscriber without ``group_id`` and a middleware made without ``kafka=True``, and the
    runner's configuration errors stop the subscriber instead (see the module's docstring,
    "Kafka"). A handler raising
    FastStream's ``NackMessage`` / ``RejectMessage`` / ``AckMessage`` is a failure like any
    other exception: rolled back, then retried or dead-lettered by the rules.
    """

    def __init__(
        self,
        *,
        session_factory: Callable[[], AsyncSession],
        inbox: Inbox,
        consumer_name: str,
        context_key: str = SESSION_CONTEXT_KEY,
        dead_letter_suffix: str = DEFAULT_DEAD_LETTER_SUFFIX,
        kafka: bool = False,
        options: DeliveryOptions | None = None,
    ) -> None:
        entry = "InboxMiddleware()"
        shared = options_of(options, entry, refused=[("retry_delay", NO_RETRY_DELAY)])
        readiness = check_consumer(
            entry,
            session_factory=session_factory,
            inbox=inbox,
            handler=NO_HANDLER,
            consumer_name=consumer_name,
            max_deliveries=shared.limit(),
            asynchronous=True,
        )
        key_header = shared.key(DEFAULT_KEY_HEADER)
        side = _kafka_side(kafka, readiness.inbox, consumer_name, key_header, shared.dead_letter)
        self.readiness: Readiness = readiness if side is None else side.readiness(readiness)
        self.config = _Config(
            Options.of(
                session_factory,
                self.readiness.inbox,
                consumer_name,
                shared.limit(),
                shared.on_settled,
            ),
            key_header=key_header,
            context_key=context_key,
            dead_letter_suffix=dead_letter_suffix,
            keyless=KeylessStreak(key_header, shared.max_keyless),
            kafka=side,
        )

    async def check(self) -> None:
        """Check the middleware can process messages: the inbox table exists, the session
        factory makes AsyncSessions, the engine is not autocommit. Returns None or raises.
        Await it in the application's start-up hook (FastStream's ``@app.on_startup``)
        so a wrong setup fails before the broker consumes, and from a health endpoint.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`; with
            ``kafka=True``, :class:`~sa_inbox.exc.MissingTable` while
            ``inbox_kafka_attempts`` is missing; the ConfigurationError that stopped a Kafka
            subscriber.
        :raises MissingKeyHeader: once a run of keyless messages stopped a subscriber (see
            the module's docstring).
        """
        if self.config.stopped:
            raise self.config.stopped[0]
        await self.readiness.check_async()

    def __call__(self, msg: Any, /, *, context: ContextRepo) -> BaseMiddleware[Any, Any]:
        """FastStream's middleware protocol: a middleware for one incoming message."""
        return _InboxScope(msg, context=context, config=self.config)


@dataclass(frozen=True)
class _Config:
    process: Options
    key_header: str
    context_key: str
    dead_letter_suffix: str
    keyless: KeylessStreak
    #: ``kafka=True``: the attempts table and the dead-letter topic.
    kafka: KafkaSide | None = None
    #: The MissingKeyHeader (or, on Kafka, the ConfigurationError) that stopped a
    #: subscriber, once one did.
    stopped: list[ConfigurationError] = field(default_factory=list)


class _InboxScope(BaseMiddleware[Any, Any]):
    """The middleware of one message: ``consume_scope`` runs the rest of the chain (the
    decoding and the user's handler) inside the inbox transaction."""

    def __init__(self, msg: Any, /, *, context: ContextRepo, config: _Config) -> None:
        super().__init__(msg, context=context)
        self.config = config

    async def consume_scope(
        self, call_next: Callable[[StreamMessage[Any]], Awaitable[Any]], msg: StreamMessage[Any]
    ) -> Any:
        _check(msg)
        if _kind(msg) == "kafka":
            return await self._consume_kafka(call_next, msg)
        config = self.config
        delivery = await delivery_of(msg, config.key_header)
        settler = _Settler(msg, config.dead_letter_suffix)
        await _count_keyless(config, delivery, settler)
        return await self._process(call_next, msg, delivery, settler)

    async def _process(
        self,
        call_next: Callable[[StreamMessage[Any]], Awaitable[Any]],
        msg: StreamMessage[Any],
        delivery: Delivery,
        settler: _Settler,
    ) -> Any:
        config = self.config
        returned: list[Any] = []

        async def call(session: AsyncSession, delivery: Delivery) -> None:
            with self.context.scope(config.context_key, session):
                try:
                    returned[:] = [await call_next(msg)]
                except BaseException as exc:
                    settler.errors.append(exc)
                    raise
            await settler.processed(session)

        # the subscriber's handler owns the consumer name (sa_inbox.consumers), not this
        # closure, which every middleware of every subscriber shares
        handler = stands_for(call, subscriber_handler(call_next))
        settlement = await process_async(
            delivery, settler, handler=handler, **config.process.kwargs()
        )
        if settlement.disposition is not Disposition.PROCESSED:
            # settled already; SkipMessage stops FastStream from publishing a result (the
            # handler's return value exists only for the delivery that processed it)
            raise SkipMessage
        return returned[0]

    async def _consume_kafka(
        self, call_next: Callable[[StreamMessage[Any]], Awaitable[Any]], msg: StreamMessage[Any]
    ) -> Any:
        """A Kafka record (see the module's docstring, "Kafka"): never left unsettled while
        the subscriber goes on, since its next ack would commit past it."""
        config = self.config
        side = config.kafka
        if side is None:
            raise ConfigurationError(
                "a KafkaBroker's record reached InboxMiddleware made without kafka=True: "
                "Kafka keeps no delivery count, pass kafka=True (failed attempts are counted "
                "in the inbox_kafka_attempts table)"
            )
        subscriber = self.context.get("handler_")
        if getattr(subscriber, "group_id", "") is None:
            raise ConfigurationError(
                "a Kafka subscriber without group_id: InboxMiddleware acks by committing "
                "the offset to the consumer group; give the subscriber a group_id"
            )
        record = side.record_of(msg.raw_message)
        settler = _KafkaSettler(msg, config, side, record, self.context.get("broker"))
        try:
            await _count_keyless(config, record.delivery, settler)
            record = settler.record = await side.counted(
                record, config.process.session_factory, config.process.outage
            )
            return await self._process(call_next, msg, record.delivery, settler)
        except SkipMessage:
            raise
        except StopConsume:
            await settler.close()
            raise
        except ConfigurationError as error:
            await settler.give_back()
            _stop(config, error, "inbox.configuration.error")
            await settler.close()
            raise StopConsume from error
        except BaseException:
            await settler.give_back()
            raise


#: How many layers of middlewares :func:`subscriber_handler` looks through.
MAX_MIDDLEWARES = 100


def subscriber_handler(call_next: Callable[..., Any]) -> Callable[..., Any]:
    """The subscriber's handler (the user's function) that ``call_next`` ends in.

    FastStream calls each middleware's ``consume_scope`` with the rest of the chain:
    ``functools.partial(next_middleware.consume_scope, rest)`` down to the bound method
    ``call_wrapped`` of the handler's ``HandlerCallWrapper``, which holds the decorated
    function (``faststream/_internal/endpoint/subscriber/call_item.py``, ``HandlerItem.call``;
    :func:`sa_inbox._compat.faststream_handler`).

    :raises ConfigurationError: if the chain ends in no such wrapper (a FastStream release
        that builds it otherwise): the consumer name's owner would be unknown.
    """
    layer: Any = call_next
    for _ in range(MAX_MIDDLEWARES):
        if isinstance(layer, functools.partial) and layer.args:
            layer = layer.args[0]
            continue
        original = faststream_handler(getattr(layer, "__self__", None))
        if original is not None:
            return original
        break
    raise ConfigurationError(
        f"InboxMiddleware cannot find the subscriber's handler behind {call_next!r}: this "
        "FastStream release builds its middleware chain otherwise, and the consumer name's "
        "owner (sa_inbox.consumers) would be unknown"
    )


async def _count_keyless(config: _Config, delivery: Delivery, settler: _Settler) -> None:
    """Count ``delivery`` in the run of keyless messages (see the module's docstring).

    :raises StopConsume: at the run's ``max_keyless``-th message (given back first), and for
        every keyless message after it.
    """
    streak = config.keyless
    if not streak.joins(delivery):
        streak.keyed()
        return
    streak.hold(delivery, settler)
    streak.release()  # settled now: dead-lettered below, or given back
    if not streak.full:
        streak.settled += 1
        return
    error = streak.error()
    await settler.give_back()
    _stop(config, error, "inbox.key.missing")
    raise StopConsume from error


def _stop(config: _Config, error: ConfigurationError, event: str) -> None:
    """Keep ``error`` for :meth:`InboxMiddleware.check` and log it (once): a subscriber
    stops consuming."""
    if not config.stopped:
        config.stopped.append(error)
        logger.error(
            "consumer %s: %s; the subscriber stops consuming",
            config.process.consumer_name,
            error,
            extra={"event": event, "consumer_name": config.process.consumer_name},
        )


def _kafka_side(
    kafka: bool, inbox: Inbox, consumer_name: str, key_header: str, topic: str | None
) -> KafkaSide | None:
    """``kafka=True``: the Kafka side (its module needs the ``kafka`` extra)."""
    if not kafka:
        if topic is not None:
            raise InvalidArgument(
                "InboxMiddleware(): options.dead_letter is for kafka=True (a KafkaBroker) "
                "only: a RabbitMQ queue dead-letters through its own dead-letter exchange, a "
                "Redis stream to its name plus dead_letter_suffix"
            )
        return None
    from .kafka.faststream import KafkaSide

    return KafkaSide(inbox, consumer_name, key_header, topic, entry="InboxMiddleware()")


def _check(msg: StreamMessage[Any]) -> None:
    """Refuses what cannot be processed exactly once (a configuration error)."""
    if msg.committed is not None or _acked_on_delivery(msg):
        raise ConfigurationError(
            "the message was acknowledged before the handler ran (ack_policy="
            "AckPolicy.ACK_FIRST, a no-ack consumer, Kafka's auto-commit or a core NATS "
            "subscriber): a crash would "
            "lose it; use AckPolicy.MANUAL (NATS: a JetStream subscriber) with InboxMiddleware"
        )
    if isinstance(msg.raw_message, list | tuple) or _kind(msg) == "redis-batch":
        raise ConfigurationError("InboxMiddleware does not support batch subscribers")


def _acked_on_delivery(msg: StreamMessage[Any]) -> bool:
    """RabbitMQ's ``ACK_FIRST`` consumes with ``no_ack`` (aio-pika locks the message: it
    cannot be acked, nacked or rejected); FastStream marks core NATS messages acked."""
    kind = _kind(msg)
    if kind == "rabbit":
        return bool(msg.raw_message.locked)
    if kind == "nats":
        return bool(msg.raw_message.is_acked)
    return False


# -- the message → Delivery mapping and the settling, per broker -------------------------


async def delivery_of(msg: StreamMessage[Any], key_header: str) -> Delivery:
    """The :class:`Delivery` of a FastStream message.

    :param msg: FastStream's message (``RabbitMessage``, ``RedisStreamMessage``,
        ``NatsMessage``; others get a delivery count of 1, ``KafkaMessage`` too: the
        middleware made with ``kafka=True`` counts a Kafka record's deliveries in the
        attempts table).
    :param key_header: the header holding the producer's key; absent gives a Delivery
        without a key (dead-lettered by :func:`~sa_inbox.brokers.process_async`).
    :returns: the key (a ``str`` header, or ``bytes`` decoded as UTF-8; a value of another
        type gives no key and a :attr:`~sa_inbox.brokers.Delivery.key_error`), the raw body
        bytes, the delivery count as the module's docstring says per broker (Redis: one
        ``XPENDING`` round trip), the headers, and the broker's reference of this delivery
        (for logs only).
    :raises redis.RedisError: if the Redis ``XPENDING`` fails (the message stays pending).
    """
    key, key_error = read_key(msg.headers.get(key_header))
    return Delivery(
        message_id=key,
        key_error=key_error,
        body=msg.body if isinstance(msg.body, bytes) else bytes(msg.body),
        delivery_count=max(1, await _delivery_count(msg)),
        headers=dict(msg.headers),
        broker_ref=_broker_ref(msg),
    )


def _kind(msg: StreamMessage[Any]) -> str:
    """``rabbit``, ``redis-stream``, ``redis-batch``, ``nats``, ``kafka`` or ``other`` (Redis
    lists and pub/sub: no redelivery, no delivery count).

    Tested by class, on the modules already imported (a message of a broker means its
    FastStream module is loaded; the others' client libraries need not be installed)."""
    for module, name, kind in _KINDS:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(msg, getattr(loaded, name)):
            return kind
    return "other"


_KINDS = (
    ("faststream.rabbit.message", "RabbitMessage", "rabbit"),
    ("faststream.redis.message", "RedisStreamMessage", "redis-stream"),
    ("faststream.redis.message", "RedisBatchStreamMessage", "redis-batch"),
    ("faststream.nats.message", "NatsMessage", "nats"),
    ("faststream.kafka.message", "KafkaMessage", "kafka"),
)


async def _delivery_count(msg: StreamMessage[Any]) -> int:
    kind = _kind(msg)
    raw = msg.raw_message
    if kind == "rabbit":
        count = (raw.headers or {}).get("x-delivery-count")
        return int(count) + 1 if count is not None else 2 if raw.redelivered else 1
    if kind == "redis-stream":
        return int(await msg.get_delivery_count())  # type: ignore[attr-defined]
    if kind == "nats":
        try:
            return int(raw.metadata.num_delivered)
        except Exception:  # core NATS: no JetStream metadata, no redelivery
            return 1
    return 1


def _broker_ref(msg: StreamMessage[Any]) -> str:
    kind = _kind(msg)
    raw = msg.raw_message
    if kind == "rabbit":
        return f"delivery_tag={raw.delivery_tag}"
    if kind == "redis-stream":
        return "entry=" + ",".join(i.decode() for i in raw["message_ids"])
    if kind == "kafka":
        return f"{raw.topic}[{raw.partition}]@{raw.offset}"
    if kind == "nats":
        try:
            return f"stream_seq={raw.metadata.sequence.stream}"
        except Exception:
            return f"subject={raw.subject}"
    return ""


class _Settler:
    """ack / retry / dead-letter through FastStream's message (see the module's docstring)."""

    def __init__(self, msg: StreamMessage[Any], dead_letter_suffix: str) -> None:
        self.msg = msg
        self.dead_letter_suffix = dead_letter_suffix
        #: What the handler raised, on each attempt of this delivery.
        self.errors: list[BaseException] = []

    async def processed(self, session: AsyncSession) -> None:
        """In the claim's transaction, after the handler succeeded."""

    async def ack(self) -> None:
        await self.msg.ack()

    async def give_back(self) -> None:
        """Unprocessed and unsettled: requeued (RabbitMQ, NATS), left pending (Redis)."""
        await self.msg.nack()

    async def retry(self) -> None:
        await self.msg.nack()

    async def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        if _kind(self.msg) == "redis-stream":
            await _redis_dead_letter(self.msg, self.dead_letter_suffix, reason, detail)
            await self.msg.ack()  # XACKed already: marks FastStream's message settled
        else:
            await self.msg.reject()


class _KafkaSettler(_Settler):
    """A Kafka record's ack (offset commit), retry (seek back) and dead letter (published,
    then the offset committed), its failed attempts counted in the attempts table (see
    the module's docstring, "Kafka")."""

    def __init__(
        self,
        msg: StreamMessage[Any],
        config: _Config,
        side: KafkaSide,
        record: Record,
        broker: Any,
    ) -> None:
        super().__init__(msg, config.dead_letter_suffix)
        self.config = config
        self.side = side
        self.record = record
        self.broker = broker

    async def processed(self, session: AsyncSession) -> None:
        await self.side.clear(session, self.record)

    async def give_back(self) -> None:
        """Sought back to the record (FastStream's nack), unless settled already; a failure
        to seek (the partition revoked meanwhile: its new owner fetches it) is logged."""
        try:
            await self.msg.nack()
        except Exception as exc:
            logger.warning(
                "consumer %s: %s not sought back (%s); it comes again from the group's "
                "committed offset",
                self.config.process.consumer_name,
                self.record.delivery.broker_ref,
                exc,
            )

    async def close(self) -> None:
        """Stop the record's aiokafka consumer (it leaves the group), before FastStream's
        ``StopConsume``: FastStream's stop cancels the consume task it runs in, which would
        interrupt ``AIOKafkaConsumer.stop()`` past its first ``await`` and leave its
        connections open."""
        try:
            await self.msg.consumer.stop()  # type: ignore[attr-defined]
        except Exception as exc:
            logger.warning("consumer %s: stopping: %s", self.config.process.consumer_name, exc)

    async def retry(self) -> None:
        await self.side.failed(self.record, self._error(), self.config.process.session_factory)
        await self.msg.nack()

    async def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        if reason is DeadLetterReason.DELIVERY_LIMIT:
            await self.side.failed(
                self.record, self._error(detail), self.config.process.session_factory
            )
        await self.side.publish_dead_letter(self.broker, self.record, reason, detail)
        await self.side.forget(self.record, self.config.process.session_factory)
        await self.msg.ack()

    def _error(self, default: str = "the transaction failed") -> str:
        if not self.errors:
            return default
        error = self.errors[-1]
        return f"{type(error).__name__}: {error}"


async def _redis_dead_letter(
    msg: StreamMessage[Any], suffix: str, reason: DeadLetterReason, detail: str
) -> None:
    """``XADD`` the entry's fields, with the reason, to the dead-letter stream and ``XACK``
    the entry, atomically: the Redis adapter's script
    (:func:`sa_inbox.brokers.redis.core.dead_letter_script_arguments`), not a
    ``MULTI``/``EXEC``, which would still run the ``XACK`` when the ``XADD`` fails (Redis
    transactions do not roll back) and lose the entry."""
    from .redis.core import Entry, dead_letter_script_arguments

    raw: Mapping[str, Any] = msg.raw_message
    (entry_id,) = raw["message_ids"]  # batch subscribers are refused
    entry = Entry(entry_id.decode(), raw["data"], await _delivery_count(msg))
    client: Any = msg.consumer  # type: ignore[attr-defined]  # the Redis client
    stream = raw["channel"]
    group = msg.group  # type: ignore[attr-defined]  # the Redis subscriber's consumer group
    await client.eval(
        *dead_letter_script_arguments(stream, group, stream + suffix, entry, reason, detail)
    )
