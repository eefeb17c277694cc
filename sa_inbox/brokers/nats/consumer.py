"""An asyncio consumer on a durable JetStream **pull** consumer: :class:`AsyncConsumer`, made
first and run after (:func:`consume`, the function it replaces, is deprecated).

Each fetched message goes through :func:`~sa_inbox.brokers.process_async` (claim, handler,
commit, then ack), so a message JetStream delivers twice changes the database once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.errors import NotFoundError

from ...claim import Inbox
from ...exc import ConfigurationError, DatabaseUnavailable, InvalidArgument, MissingKeyHeader
from ...outage import OutageGate
from ..delivery import Delivery
from ..keys import KeylessStreak, flush_async, give_back_async, offer_async
from ..options import DeliveryOptions, options_of
from ..process import DEFAULT_MAX_DELIVERIES, process_async
from ..reconnect import Reconnects
from ..startup import NO_CONSUMER_NAME, check_client, check_consumer, default_name
from ._compat import delivered_unfetched, reconnecting
from .client import CLIENT
from .delivery import DEFAULT_KEY_HEADER, to_delivery
from .settler import DEFAULT_ACK_TIMEOUT, JetStreamSettler, backoff

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = [
    "DEFAULT_ACK_WAIT",
    "DEFAULT_BATCH",
    "DEFAULT_FETCH_TIMEOUT",
    "AsyncConsumer",
    "StopFlag",
    "check",
    "consume",
    "consumer_config",
    "ensure_consumer",
]

logger = logging.getLogger("sa_inbox.brokers.nats")

#: Seconds JetStream waits for an ack before redelivering (the visibility timeout).
DEFAULT_ACK_WAIT = 30.0
#: Messages per fetch.
DEFAULT_BATCH = 10
#: Seconds one fetch waits for messages; also how soon :class:`AsyncConsumer` notices its stop flag.
DEFAULT_FETCH_TIMEOUT = 1.0

#: What a JetStream request raises while the server restarts or the client reconnects:
#: :class:`AsyncConsumer` waits with back-off and fetches again.
_RECONNECTABLE = (
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.UnexpectedEOF,
    nats.js.errors.ServiceUnavailableError,
)


class StopFlag(Protocol):
    """What :class:`AsyncConsumer` polls between fetches: an :class:`asyncio.Event`, or a
    :class:`threading.Event` set from another thread."""

    def is_set(self) -> bool: ...


def consumer_config(
    durable: str, *, filter_subject: str | None = None, ack_wait: float = DEFAULT_ACK_WAIT
) -> ConsumerConfig:
    """The durable pull consumer's configuration.

    ``ack_policy`` explicit; ``ack_wait`` is the visibility timeout; ``max_deliver`` is
    **-1** (unlimited). The delivery limit is sa-inbox's (``max_deliveries`` of
    :class:`AsyncConsumer`), not JetStream's: with ``max_deliver`` = N, a consumer killed while
    handling the N-th delivery leaves the message that JetStream will never deliver again,
    neither acked nor dead-lettered (docs.nats.io "Consumers", MaxDeliver: the server stops
    redelivering and only publishes a ``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES``
    advisory). N + 1 moves the same hole one delivery
    later. With -1 the message keeps coming back until :class:`AsyncConsumer` settles it, and any
    delivery past ``max_deliveries`` is dead-lettered without running the handler.

    :param durable: the durable consumer name (letters, digits, ``-``, ``_``).
    :param filter_subject: the subject(s) of the stream to consume, or None for all.
    :param ack_wait: seconds, > 0: an unacked delivery is redelivered after this long.
    """
    return ConsumerConfig(
        durable_name=durable,
        name=durable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_deliver=-1,
        filter_subject=filter_subject,
    )


async def ensure_consumer(
    js: JetStreamContext, stream: str, config: ConsumerConfig
) -> ConsumerInfo:
    """Create the durable consumer ``config.durable_name`` on ``stream`` unless it exists,
    and check that an existing one cannot lose messages.

    An existing consumer keeps its configuration (JetStream does not change it on bind).

    :raises ConfigurationError: if the consumer's ``ack_policy`` is not explicit, or its
        ``max_deliver`` is a positive limit (see :func:`consumer_config`).
    :raises nats.js.errors.NotFoundError: if ``stream`` does not exist.
    """
    assert config.durable_name is not None
    info: ConsumerInfo
    try:
        info = await js.consumer_info(stream, config.durable_name)
    except NotFoundError:
        info = await js.add_consumer(stream, config)
    existing = info.config
    if existing.ack_policy != AckPolicy.EXPLICIT:
        raise ConfigurationError(
            f"JetStream consumer {stream}/{config.durable_name} has ack_policy="
            f"{existing.ack_policy}; sa-inbox acks after the commit and needs 'explicit'"
        )
    if existing.max_deliver is not None and existing.max_deliver > 0:
        raise ConfigurationError(
            f"JetStream consumer {stream}/{config.durable_name} has max_deliver="
            f"{existing.max_deliver}: JetStream would stop redelivering a message a killed "
            "consumer left unsettled before sa-inbox dead-letters it; use max_deliver=-1 "
            "(sa-inbox's max_deliveries is the limit)"
        )
    return info


async def check_dead_letter_subject(
    js: JetStreamContext,
    stream: str,
    subject: str,
    filter_subject: str | None = None,
    durable: str | None = None,
) -> str:
    """The stream that stores the dead letters published to ``subject``.

    JetStream stores a publish only in a stream whose subjects match it, and answers no
    other with a PubAck (JetStream docs, "Streams": Subjects).

    :param filter_subject: the consumer's filter subject (None: the whole ``stream``).
    :param durable: the durable consumer: where it exists, its own filter subject is the
        one read (JetStream keeps an existing consumer's configuration on bind).
    :returns: the name of the stream that captures ``subject``.
    :raises ConfigurationError: if no stream captures ``subject`` (every dead letter would
        be refused, and its message redelivered for ever), or if ``stream`` does and the
        consumer reads it (each dead letter would be consumed again).
    """
    try:
        found = await js.find_stream_name_by_subject(subject)
    except NotFoundError as exc:
        raise ConfigurationError(
            f"no JetStream stream captures the dead-letter subject {subject!r}: add one "
            f"(js.add_stream(name=..., subjects=[{subject!r}])) before the consumer runs"
        ) from exc
    if found == stream and durable is not None:
        with contextlib.suppress(NotFoundError):
            filter_subject = (await js.consumer_info(stream, durable)).config.filter_subject
    if found == stream and (filter_subject is None or subject_matches(subject, filter_subject)):
        raise ConfigurationError(
            f"the dead-letter subject {subject!r} is captured by {stream!r}, the stream the "
            "consumer reads: each dead letter would be consumed again; capture it in a "
            "stream of its own"
        )
    return str(found)


def subject_matches(subject: str, pattern: str) -> bool:
    """Whether ``subject`` matches ``pattern``: ``*`` stands for one token, a final ``>``
    for one or more (NATS docs, "Subject-Based Messaging": Wildcards)."""
    tokens, wanted = subject.split("."), pattern.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > index
        if index >= len(tokens) or token not in ("*", tokens[index]):
            return False
    return len(tokens) == len(wanted)


async def consume(
    js: JetStreamContext,
    stream: str,
    durable: str,
    *,
    stop: StopFlag | None = None,
    **options: Any,
) -> int:
    """Deprecated: ``await AsyncConsumer(js, stream, durable, **options).run(stop)``, which
    takes the same arguments and follows the same rules (:class:`AsyncConsumer`).

    :returns: the number of messages settled.
    :raises ConfigurationError: as :class:`AsyncConsumer` and its :meth:`~AsyncConsumer.run`.
    """
    warnings.warn(
        "sa_inbox.brokers.nats.consume() is deprecated: use "
        "await AsyncConsumer(js, stream, durable, ...).run(stop)",
        DeprecationWarning,
        stacklevel=2,
    )
    return await AsyncConsumer(js, stream, durable, **options).run(stop)


async def check(
    *,
    session_factory: Callable[[], AsyncSession],
    inbox: Inbox | Any,
    handler: Callable[[AsyncSession, Delivery], Awaitable[Any] | Any],
) -> None:
    """The readiness check :meth:`AsyncConsumer.run` makes before it fetches, for a health
    endpoint: the objects (as :class:`AsyncConsumer` checks them), the inbox table exists,
    the session factory makes AsyncSessions, the engine is not autocommit. Returns None or
    raises.

    :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`.
    """
    readiness = check_consumer(
        "sa_inbox.brokers.nats.check()",
        session_factory=session_factory,
        inbox=inbox,
        handler=handler,
        consumer_name=NO_CONSUMER_NAME,
        max_deliveries=DEFAULT_MAX_DELIVERIES,
        asynchronous=True,
    )
    await readiness.check_async()


class AsyncConsumer:
    """Consume ``stream`` through the durable pull consumer ``durable``: made (and checked)
    first, then ``await consumer.run()`` until :meth:`stop`, as the other brokers'
    ``AsyncConsumer``.

    Example::

        consumer = AsyncConsumer(
            js, "PAYMENTS", "billing",
            session_factory=async_sessionmaker(engine), inbox=inbox, handler=apply,
            options=DeliveryOptions(dead_letter="payments.dead"),
        )
        await consumer.run()  # until consumer.stop()

    When made, the objects are checked (before any request or SQL); :meth:`run` first awaits
    :meth:`check` (the inbox table exists, the session factory makes AsyncSessions, the
    engine is not autocommit, the handler fits), so a consumer set up wrongly fails before
    it consumes.
    Each message is fetched (``fetch(batch, timeout=fetch_timeout)``), mapped by
    :func:`~sa_inbox.brokers.nats.delivery.to_delivery` (the key from ``options.key_source``), and
    run through :func:`~sa_inbox.brokers.process_async` with a
    :class:`~sa_inbox.brokers.nats.settler.JetStreamSettler`: acked after the commit,
    ``nak``-ed with ``options.retry_delay`` on failure, published to
    ``options.dead_letter`` then
    terminated at the limit or without a key.

    **Two layers of dedup.** JetStream drops a *publish* whose ``Nats-Msg-Id`` it stored
    inside the stream's ``duplicate_window`` ("JetStream Model Deep Dive: Message
    Deduplication", 2 minutes by default): such a duplicate never reaches the consumer. The
    inbox covers what that cannot: redeliveries of one stored message (a consumer killed
    after the commit and before the ack, an ack lost, ``ack_wait`` passed) and duplicates
    published outside the window or keyed on another header.

    **Stopping.** :meth:`stop` (and :meth:`run`'s ``stop`` flag) is polled between fetches
    and after each batch (so within ``fetch_timeout`` plus one batch's handling); the batch
    in hand is finished and settled.
    A consumer killed instead leaves its fetched messages to JetStream, which redelivers
    them after ``ack_wait``. Keep ``batch`` x handler time well under ``ack_wait``: a
    message still waiting in the batch past ``ack_wait`` is redelivered to another consumer
    too (safe, the inbox claim lets one of them apply it, but wasted).

    :param js: a JetStream context (``nats.connect(...).jetstream()``); not closed here.
    :param stream: the stream's name (it must exist).
    :param durable: the durable pull consumer's name: made by :func:`ensure_consumer` with
        :func:`consumer_config` if missing; every process of this consumer uses the same one.
    :param session_factory: an ``async_sessionmaker``.
    :param inbox: the :class:`~sa_inbox.Inbox` (or its AsyncInbox) to claim in.
    :param handler: ``async def handler(session, delivery)``, the business change; must not
        commit.
    :param options: the settings every consumer shares
        (:class:`~sa_inbox.brokers.DeliveryOptions`). ``dead_letter`` (required): the
        subject dead letters are published to, a subject of another stream (the dead-letter
        stream), kept apart from processed messages. ``key_source``: the header holding the
        producer's dedup key (default ``Nats-Msg-Id``). ``max_deliveries``: deliveries
        allowed per message (``num_delivered``). ``retry_delay``: seconds before a failed
        delivery comes back, from its delivery count; default
        :func:`~sa_inbox.brokers.nats.settler.backoff` ``()`` (1 s doubling to 60 s).
        ``max_keyless``: messages without the key since the last keyed one, however far
        apart, after which those held are given back (``-NAK`` without delay; JetStream
        counts each in ``num_delivered``) and :class:`~sa_inbox.exc.MissingKeyHeader` is
        raised: a misspelled ``key_source``. A keyed message, or an empty fetch, settles
        those held as the producer's (dead-lettered ``missing_message_id``)
        (:mod:`sa_inbox.brokers.keys`).
    :param consumer_name: the inbox's consumer name (the claim is per consumer); defaults
        to ``durable``.
    :param filter_subject: the consumer's filter subject when it is created.
    :param ack_wait: seconds, the visibility timeout, when the consumer is created.
    :param batch: messages per fetch, >= 1.
    :param fetch_timeout: seconds one fetch waits, > 0.
    :param ack_timeout: seconds to wait for the server to confirm an ack.
    :raises ConfigurationError: before any request, for objects of the wrong kind or half
        (:func:`sa_inbox.brokers.startup.check_consumer`), ``options`` that are not a
        DeliveryOptions or name no ``dead_letter`` (:class:`~sa_inbox.exc.InvalidArgument`)
        and :func:`check`'s findings; from
        :func:`ensure_consumer`; the first message whose handling raised one (that message
        is left unsettled; see :func:`~sa_inbox.brokers.process_async`);
        :class:`~sa_inbox.exc.MissingKeyHeader` (see ``options.max_keyless``).

    **Outages and reconnects.** While the database cannot be reached the message in hand is
    held, uncounted: nothing new is fetched, and every third of the consumer's ``ack_wait``
    each unsettled message of the batch gets ``+WPI`` (``in_progress()``: JetStream resets
    its redelivery timer and does not count a delivery; "JetStream Model Deep Dive:
    Acknowledgement Models", AckProgress), so JetStream redelivers none of them
    (:mod:`sa_inbox.outage`). A lost NATS connection is nats-py's to make again (its
    ``allow_reconnect``, ``max_reconnect_attempts``, ``reconnect_time_wait``; it restores the
    pull subscription); meanwhile :meth:`run` logs one WARNING, waits with back-off
    between fetches, and one INFO once the client is connected again. A settlement lost
    with the connection leaves its message to come back after ``ack_wait``, with
    ``num_delivered`` one more (JetStream's rule). Connect with
    ``max_reconnect_attempts=-1``: a client that gave up is closed, and :meth:`run`
    raises ``ConnectionClosedError``.

    :raises nats.js.errors.NotFoundError: if ``stream`` does not exist.
    :raises nats.errors.ConnectionClosedError: if the connection closes (nats-py stopped
        reconnecting).
    """

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        durable: str,
        *,
        session_factory: Callable[[], AsyncSession],
        inbox: Inbox | Any,
        handler: Callable[[AsyncSession, Delivery], Awaitable[Any] | Any],
        options: DeliveryOptions,
        consumer_name: str | None = None,
        filter_subject: str | None = None,
        ack_wait: float = DEFAULT_ACK_WAIT,
        batch: int = DEFAULT_BATCH,
        fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
    ) -> None:
        entry = "sa_inbox.brokers.nats.AsyncConsumer()"
        check_client(js, CLIENT, asynchronous=True, entry=entry)
        for name, value in (("stream", stream), ("durable", durable)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{entry}: {name} must be a non-empty string, not {value!r}")
        shared = options_of(options, entry)
        if shared.dead_letter is None:
            raise InvalidArgument(
                f"{entry}: options.dead_letter must name the dead-letter subject (JetStream "
                "has none of its own)"
            )
        if {"*", ">"} & set(shared.dead_letter.split(".")):
            raise InvalidArgument(
                f"{entry}: options.dead_letter must be a subject without wildcards (a "
                f"publish goes to one subject), not {shared.dead_letter!r}"
            )
        self.consumer_name = default_name(consumer_name, durable)
        self.readiness = check_consumer(
            entry,
            session_factory=session_factory,
            inbox=inbox,
            handler=handler,
            consumer_name=self.consumer_name,
            max_deliveries=shared.limit(),
            asynchronous=True,
        )
        self.key_header = shared.key(DEFAULT_KEY_HEADER)
        self.max_keyless = shared.max_keyless
        self.js, self.stream, self.durable = js, stream, durable
        self.session_factory, self.handler = session_factory, handler
        self.dead_letter_subject = shared.dead_letter
        self.filter_subject = filter_subject
        self.max_deliveries = shared.limit()
        self.ack_wait, self.ack_timeout = ack_wait, ack_timeout
        self.retry_delay = shared.delay(backoff())
        self.batch, self.fetch_timeout = batch, fetch_timeout
        self.on_settled = shared.on_settled
        self._stop = _Stop()

    async def check(self) -> None:
        """The readiness check :meth:`run` makes first (the inbox table exists, the session
        factory makes AsyncSessions, the engine is not autocommit, the handler fits, the
        consumer name's owner); returns None or raises, for a health endpoint.

        :raises ConfigurationError: see :func:`check_dead_letter_subject` and
            :func:`sa_inbox.readiness.check_ready_async`.
        """
        await check_dead_letter_subject(
            self.js, self.stream, self.dead_letter_subject, self.filter_subject, self.durable
        )
        await self.readiness.check_async()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the batch in hand (from the event loop's thread)."""
        self._stop.stopped = True

    async def run(self, stop: StopFlag | None = None) -> int:
        """Consume until :meth:`stop` is called or ``stop`` (an :class:`asyncio.Event`, or a
        :class:`threading.Event`) is set.

        :param stop: a flag to stop on, besides :meth:`stop`.
        :returns: the number of messages settled.
        :raises: as the class says.
        """
        self._stop.extra = stop
        return await _consume(self, self._stop)


async def _consume(consumer: AsyncConsumer, stop: StopFlag) -> int:
    """:meth:`AsyncConsumer.run`: ensure the durable consumer, then fetch, process and settle
    until ``stop`` is set (see :class:`AsyncConsumer`)."""
    js, stream, durable = consumer.js, consumer.stream, consumer.durable
    readiness, consumer_name = consumer.readiness, consumer.consumer_name
    streak = KeylessStreak(consumer.key_header, consumer.max_keyless)
    key_header, ack_wait, batch = consumer.key_header, consumer.ack_wait, consumer.batch

    async def stopped_within(seconds: float) -> bool:
        """Wait ``seconds`` (less once ``stop`` is set); whether it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not _set(stop) and (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(left, 0.1))
        return _set(stop)

    starting = OutageGate(consumer_name, hooks=readiness.inbox.hooks, sleep=stopped_within)
    if not await readiness.start_async(starting):
        return 0
    await check_dead_letter_subject(
        js, stream, consumer.dead_letter_subject, consumer.filter_subject, durable
    )
    config = consumer_config(durable, filter_subject=consumer.filter_subject, ack_wait=ack_wait)
    info = await ensure_consumer(js, stream, config)
    subscription = await js.pull_subscribe_bind(durable=durable, stream=stream)
    reconnects = Reconnects(f"JetStream consumer {stream}/{durable}")
    unsettled: list[Msg] = []

    async def keep_alive() -> None:
        for msg in [*unsettled, *delivered_unfetched(subscription)]:
            await msg.in_progress()

    gate = OutageGate(
        consumer_name,
        hooks=readiness.inbox.hooks,
        sleep=stopped_within,
        keep_alive=keep_alive,
        keep_alive_every=(info.config.ack_wait or ack_wait) / 3,
    )

    def settler_of(msg: Msg, delivery: Delivery) -> JetStreamSettler:
        return JetStreamSettler(
            msg,
            delivery,
            js=js,
            dead_letter_subject=consumer.dead_letter_subject,
            retry_delay=consumer.retry_delay,
            ack_timeout=consumer.ack_timeout,
        )

    async def settle(delivery: Delivery, settler: JetStreamSettler) -> int:
        """1 if settled; 0 if the broker refused a settlement (it comes back after
        ``ack_wait``: a committed message as a duplicate). Configuration errors propagate."""
        try:
            await process_async(
                delivery,
                settler,
                session_factory=consumer.session_factory,
                inbox=readiness.inbox,
                consumer_name=consumer_name,
                handler=consumer.handler,
                max_deliveries=consumer.max_deliveries,
                on_settled=consumer.on_settled,
                outage=gate,
            )
        except nats.errors.Error as exc:
            logger.warning(
                "JetStream message %s left unsettled (%s); redelivered after ack_wait",
                settler.msg.reply,
                exc,
                extra={"action": "unsettled"},
            )
            return 0
        return 1

    async def settle_batch(msgs: list[Msg]) -> int:
        count = 0
        if not msgs:
            count += sum(await flush_async(streak, settle))
        for n, msg in enumerate(msgs):
            unsettled[:] = msgs[n:]
            delivery = to_delivery(msg, key_header=key_header)
            try:
                count += sum(await offer_async(streak, delivery, settler_of(msg, delivery), settle))
            except MissingKeyHeader:
                for rest in msgs[n + 1 :]:
                    await rest.nak()
                raise
        unsettled.clear()
        return count

    settled = 0
    try:
        while not _set(stop):
            try:
                msgs = await _fetch(subscription, batch, consumer.fetch_timeout)
                if not msgs and reconnecting(js):
                    raise nats.errors.ConnectionReconnectingError
                reconnects.connected()
                settled += await settle_batch(msgs)
            except DatabaseUnavailable:
                if not _set(stop):
                    raise
            except _RECONNECTABLE as exc:
                streak.release()  # unsettled: JetStream redelivers them after ack_wait
                unsettled.clear()
                await stopped_within(reconnects.failed(exc))
        if not reconnects.lost:
            await give_back_async(streak)  # a stop decides nothing about them
    finally:
        with contextlib.suppress(nats.errors.Error):  # a closed connection: nothing to undo
            await subscription.unsubscribe()
    return settled


class _Stop:
    """:class:`AsyncConsumer`'s stop flag: its :meth:`~AsyncConsumer.stop`, or the flag
    given to :meth:`~AsyncConsumer.run`."""

    def __init__(self) -> None:
        self.stopped = False
        self.extra: StopFlag | None = None

    def is_set(self) -> bool:
        return self.stopped or _set(self.extra)


def _set(stop: StopFlag | None) -> bool:
    return stop is not None and stop.is_set()


async def _fetch(
    subscription: JetStreamContext.PullSubscription, batch: int, timeout: float
) -> list[Msg]:
    """Up to ``batch`` messages, or none when ``timeout`` passed without any.

    nats-py raises its own ``nats.errors.TimeoutError`` on some paths of ``fetch`` and a
    plain :class:`asyncio.TimeoutError` on others (2.16.0); both are :class:`TimeoutError`.
    """
    try:
        return await subscription.fetch(batch, timeout=timeout)
    except TimeoutError:
        return []
