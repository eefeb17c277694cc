"""A FastStream middleware: consume exactly once from its RabbitMQ, Redis Streams and NATS
JetStream brokers.

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

**The key is a header the producer sets** (``key_header``, ``"idempotency-key"`` by
default), the same on all three brokers. FastStream's own ``message_id`` cannot be the key:
when the producer sets none, FastStream fills in a random one on the consumer side
(``StreamMessage.__init__``: ``message_id or correlation_id``, and ``correlation_id or
uuid4()``; the RabbitMQ parser: ``message.message_id or gen_cor_id()``; the Redis parser:
``headers.get("message_id", gen_cor_id())``), which differs between two publishes of one
payment and dedups nothing. Its Redis and NATS ``publish()`` take no ``message_id`` at all;
RabbitMQ's does (the AMQP property), and the producer may put the same value in the header.
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

Use any ``ack_policy`` except ``AckPolicy.ACK_FIRST`` (which acks before the handler runs, so a
crash loses the message; it is refused): the middleware settles every message itself, after
the commit, and FastStream's own acknowledgement then finds the message settled and does
nothing (``StreamMessage.committed``). ``AckPolicy.MANUAL`` is the clearest. Batch
subscribers are refused (one claim per message).

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
from ..exc import ConfigurationError, MissingKeyHeader
from ..outage import OutageGate
from .delivery import DeadLetterReason, Delivery, Disposition
from .keys import DEFAULT_MAX_KEYLESS, KeylessStreak, check_key_name, check_max_keyless, read_key
from .process import DEFAULT_MAX_DELIVERIES, OnSettled, process_async
from .startup import NO_HANDLER, check_consumer

with optional_dependencies(__name__, "faststream", "faststream"):
    from faststream import BaseMiddleware, ContextRepo, StreamMessage
    from faststream.exceptions import SkipMessage, StopConsume

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = [
    "DEFAULT_DEAD_LETTER_SUFFIX",
    "DEFAULT_KEY_HEADER",
    "SESSION_CONTEXT_KEY",
    "InboxMiddleware",
    "delivery_of",
]

logger = logging.getLogger(__name__)

#: The header carrying the producer's idempotency key, unless ``key_header`` names another.
DEFAULT_KEY_HEADER = "idempotency-key"
#: The FastStream context name of the transaction's AsyncSession.
SESSION_CONTEXT_KEY = "inbox_session"
#: Appended to a Redis stream's name for its dead-letter stream.
DEFAULT_DEAD_LETTER_SUFFIX = ":dead"  # as the Redis adapter's default


class InboxMiddleware:
    """FastStream middleware factory: each subscribed message is processed exactly once.

    Pass it in ``middlewares=[...]`` of a ``RabbitBroker``, ``RedisBroker`` or ``NatsBroker``
    (JetStream subscribers), or of a router. See the module's docstring for the example and
    for what each broker does.

    :param session_factory: an :class:`~sqlalchemy.ext.asyncio.async_sessionmaker`.
    :param inbox: the inbox to claim in.
    :param consumer_name: this consumer's name (``str``; the claim is per consumer).
    :param key_header: the header holding the producer's key (``str``).
    :param max_deliveries: deliveries allowed per message (``int`` >= 1) before it is
        dead-lettered (:func:`sa_inbox.brokers.process_async`'s rules).
    :param context_key: the FastStream context name the AsyncSession is set under.
    :param dead_letter_suffix: Redis Streams only: the dead-letter stream is the stream's
        name plus this.
    :param on_settled: called with each :class:`~sa_inbox.brokers.Settlement`.
    :param max_keyless: consecutive keyless messages (``int`` >= 1) after which a subscriber
        stops (see the module's docstring), or None: never (each is dead-lettered).
    :raises ConfigurationError: when it is made, for a session factory of the sync half or
        ``async_sessionmaker.begin`` (:class:`~sa_inbox.exc.InvalidSessionFactory`), an inbox
        that is neither an Inbox nor an AsyncInbox (:class:`~sa_inbox.exc.InvalidObject`), an
        empty ``key_header`` or a bad ``max_keyless`` (:class:`~sa_inbox.exc.InvalidArgument`).

    **Outages and reconnects.** While the database cannot be reached each message in hand is
    held in its handler, unsettled and uncounted, while one
    :class:`~sa_inbox.outage.OutageGate` of the middleware probes the database with back-off
    (one WARNING, one INFO per outage, for all the messages FastStream runs at once); FastStream
    takes no more than its subscriber's prefetch meanwhile. The broker connection is
    FastStream's to make again (aio-pika's ``connect_robust`` for RabbitMQ, redis-py's pool,
    nats-py's reconnect): a message whose ack was lost with it comes back, as a duplicate.

    On a message it raises :class:`~sa_inbox.ConfigurationError` (to FastStream, which logs
    it and applies the subscriber's ``ack_policy``: with ``AckPolicy.MANUAL`` the message is
    left unsettled and redelivered when the consumer stops) for a batch message, a message
    acknowledged before the handler ran (``AckPolicy.ACK_FIRST``, core NATS), and the
    runner's configuration errors (see :func:`sa_inbox.asyncio.handle`). A handler raising
    FastStream's ``NackMessage`` / ``RejectMessage`` / ``AckMessage`` is a failure like any
    other exception: rolled back, then retried or dead-lettered by the rules.
    """

    def __init__(
        self,
        *,
        session_factory: Callable[[], AsyncSession],
        inbox: Inbox,
        consumer_name: str,
        key_header: str = DEFAULT_KEY_HEADER,
        max_deliveries: int = DEFAULT_MAX_DELIVERIES,
        context_key: str = SESSION_CONTEXT_KEY,
        dead_letter_suffix: str = DEFAULT_DEAD_LETTER_SUFFIX,
        on_settled: OnSettled | None = None,
        max_keyless: int | None = DEFAULT_MAX_KEYLESS,
    ) -> None:
        entry = "InboxMiddleware()"
        self.readiness = check_consumer(
            entry,
            session_factory=session_factory,
            inbox=inbox,
            handler=NO_HANDLER,
            consumer_name=consumer_name,
            max_deliveries=max_deliveries,
            asynchronous=True,
        )
        key_header = check_key_name(key_header, "key_header", entry=entry)
        self.config = _Config(
            session_factory,
            self.readiness.inbox,
            consumer_name,
            key_header,
            max_deliveries,
            context_key,
            dead_letter_suffix,
            on_settled,
            OutageGate(consumer_name, hooks=self.readiness.inbox.hooks),
            KeylessStreak(key_header, check_max_keyless(max_keyless, entry=entry)),
        )

    async def check(self) -> None:
        """Check the middleware can process messages: the inbox table exists, the session
        factory makes AsyncSessions, the engine is not autocommit. Returns None or raises.
        Await it in the application's start-up hook (FastStream's ``@app.on_startup``)
        so a wrong setup fails before the broker consumes, and from a health endpoint.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`.
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
    session_factory: Callable[[], AsyncSession]
    inbox: Inbox
    consumer_name: str
    key_header: str
    max_deliveries: int
    context_key: str
    dead_letter_suffix: str
    on_settled: OnSettled | None
    outage: OutageGate
    keyless: KeylessStreak
    #: The MissingKeyHeader that stopped a subscriber, once one did.
    stopped: list[MissingKeyHeader] = field(default_factory=list)


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
        config = self.config
        returned: list[Any] = []
        delivery = await delivery_of(msg, config.key_header)
        settler = _Settler(msg, config.dead_letter_suffix)
        await _count_keyless(config, delivery, settler)

        async def call(session: AsyncSession, delivery: Delivery) -> None:
            with self.context.scope(config.context_key, session):
                returned[:] = [await call_next(msg)]

        # the subscriber's handler owns the consumer name (sa_inbox.consumers), not this
        # closure, which every middleware of every subscriber shares
        handler = stands_for(call, subscriber_handler(call_next))
        settlement = await process_async(
            delivery,
            settler,
            session_factory=config.session_factory,
            inbox=config.inbox,
            consumer_name=config.consumer_name,
            handler=handler,
            max_deliveries=config.max_deliveries,
            on_settled=config.on_settled,
            outage=config.outage,
        )
        if settlement.disposition is not Disposition.PROCESSED:
            # settled already; SkipMessage stops FastStream from publishing a result (the
            # handler's return value exists only for the delivery that processed it)
            raise SkipMessage
        return returned[0]


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
    if not config.stopped:
        config.stopped.append(error)
        logger.error(
            "consumer %s: %s; the subscriber stops consuming",
            config.consumer_name,
            error,
            extra={"event": "inbox.key.missing", "consumer_name": config.consumer_name},
        )
    raise StopConsume from error


def _check(msg: StreamMessage[Any]) -> None:
    """Refuses what cannot be processed exactly once (a configuration error)."""
    if msg.committed is not None or _acked_on_delivery(msg):
        raise ConfigurationError(
            "the message was acknowledged before the handler ran (ack_policy="
            "AckPolicy.ACK_FIRST, a no-ack consumer or a core NATS subscriber): a crash would "
            "lose it; use AckPolicy.MANUAL (NATS: a JetStream subscriber) with InboxMiddleware"
        )
    if isinstance(msg.raw_message, list) or _kind(msg) == "redis-batch":
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
        ``NatsMessage``; others get a delivery count of 1).
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
    """``rabbit``, ``redis-stream``, ``redis-batch``, ``nats`` or ``other`` (Redis lists and
    pub/sub: no redelivery, no delivery count).

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
