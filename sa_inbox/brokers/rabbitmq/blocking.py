"""The pika consumer (``BlockingConnection``): one delivery at a time, acked after commit.

.. code-block:: python

    consumer = Consumer(
        "amqp://guest:guest@localhost/",
        "payments",
        session_factory=Session,
        inbox=inbox,
        consumer_name="billing",
        handler=apply_payment,  # handler(session, delivery): the business change, no commit
    )
    consumer.run()  # until consumer.stop() (from any thread) or an error

The producer must set the key (the retry of a publish must carry the same one)::

    channel.basic_publish("", "payments", body, pika.BasicProperties(message_id=payment_id))
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
from sqlalchemy.orm import Session

from ...claim import Inbox
from ...exc import DatabaseUnavailable
from ...outage import OutageGate
from ..delivery import DeadLetterReason, Delivery
from ..keys import flush, offer
from ..options import DeliveryOptions
from ..process import process
from ..reconnect import Reconnecting, Reconnects
from .consumer import DEFAULT_KEYLESS_WAIT, QueueConsumer, is_configuration_close
from .message import DEFAULT_PREFETCH, dead_letter_properties, to_delivery
from .url import connection_parameters

__all__ = ["Consumer", "PikaSettler", "pika_delivery"]


def pika_delivery(
    method: Any, properties: Any, body: bytes, key_header: str | None = None
) -> Delivery:
    """The :class:`~sa_inbox.brokers.Delivery` of a pika message (see :mod:`.message`).

    :param method: the ``pika.spec.Basic.Deliver`` (or ``Basic.GetOk``) frame.
    :param properties: its ``pika.BasicProperties``.
    :param body: its body.
    :param key_header: the header with the producer's key; None for ``message_id``.
    """
    return to_delivery(
        message_id=properties.message_id,
        headers=properties.headers,
        body=body,
        redelivered=method.redelivered,
        delivery_tag=method.delivery_tag,
        key_header=key_header,
    )


class PikaSettler:
    """Ack / retry / dead-letter one pika delivery (a :class:`~sa_inbox.brokers.Settler`).

    For your own pika callback: ``process(delivery, PikaSettler(...), ...)``.

    :param channel: the ``BlockingChannel`` the message came on, in confirm mode
        (``channel.confirm_delivery()``) so the dead letter's publish is confirmed before
        the original is acked.
    :param method: the ``pika.spec.Basic.Deliver`` frame.
    :param properties: the ``pika.BasicProperties``.
    :param body: the body.
    :param queue: the queue it was consumed from (stored in the dead letter).
    :param dead_letter_queue: where dead letters go.

    **Dead letters are published to the dead-letter queue, then the original is acked**
    (rather than ``basic.reject(requeue=False)`` to the queue's dead-letter exchange): the
    reject is atomic in the broker, but RabbitMQ then adds only ``x-death`` with reason
    ``rejected``, and the reason (``missing_message_id``, the handler's error) would be lost.
    The publish is confirmed (publisher confirms, RabbitMQ docs "Consumer Acknowledgements
    and Publisher Confirms") and ``mandatory`` (a missing dead-letter queue raises
    ``pika.exceptions.UnroutableError`` instead of dropping the message), and only then is
    the original acked. A crash between the two leaves the original unacked: RabbitMQ
    redelivers it when the connection drops, and it is dead-lettered again, so the
    dead-letter queue may hold it **twice, never zero times**; a consumer of dead letters
    should dedup on ``message_id`` too.
    """

    def __init__(
        self,
        channel: Any,
        method: Any,
        properties: Any,
        body: bytes,
        *,
        queue: str,
        dead_letter_queue: str,
    ) -> None:
        self.channel = channel
        self.method = method
        self.properties = properties
        self.body = body
        self.queue = queue
        self.dead_letter_queue = dead_letter_queue

    def ack(self) -> None:
        """``basic.ack`` (after the commit)."""
        self.channel.basic_ack(self.method.delivery_tag)

    def retry(self) -> None:
        """``basic.nack(requeue=True)``: redelivered, its ``x-delivery-count`` one more."""
        self.channel.basic_nack(self.method.delivery_tag, requeue=True)

    def give_back(self) -> None:
        """Requeue it unprocessed (a run of keyless deliveries): ``basic.nack(requeue=True)``,
        or nothing once the channel is closed (RabbitMQ requeued every unacked delivery of
        the channel then: "Consumer Acknowledgements and Publisher Confirms", "Automatic
        Requeueing"). RabbitMQ 3.10's quorum queues count the return in
        ``x-delivery-count`` like any other ("Quorum Queues", "Poison Message Handling"):
        AMQP has no uncounted return."""
        if self.channel.is_open:
            self.retry()

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        """Publish to the dead-letter queue with the reason headers, confirmed, then ack.

        :raises pika.exceptions.UnroutableError: if the dead-letter queue does not exist
            (the original stays unacked: redelivered when the consumer stops).
        """
        properties = dead_letter_properties(
            vars(self.properties),
            self.properties.headers,
            queue=self.queue,
            reason=reason,
            detail=detail,
        )
        self.channel.basic_publish(
            "",
            self.dead_letter_queue,
            self.body,
            pika.BasicProperties(**properties),
            mandatory=True,
        )
        self.ack()


class Consumer(QueueConsumer, Reconnecting):
    """Consume a RabbitMQ queue with pika, each message exactly once in effect.

    Each delivery goes through :func:`sa_inbox.brokers.process`: claim and handler in one
    transaction, commit, then ``basic.ack``; a failure is ``basic.nack(requeue=True)``, or at
    the last delivery allowed a dead letter (see :class:`PikaSettler`); a message without a
    key is dead-lettered unprocessed. Manual acks only: RabbitMQ redelivers every unacked
    delivery when the consumer's connection closes (RabbitMQ docs, "Consumer
    Acknowledgements and Publisher Confirms", section "Automatic Requeueing"), so a consumer
    killed after its commit and before its ack leaves a duplicate that the next consumer
    acks without running the handler.

    The queue should be a quorum queue (:func:`~.queues.declare_queue`): only it gives a
    delivery count (:mod:`.message`).

    RabbitMQ 3.10 counts *every* return in ``x-delivery-count``, including the prefetched
    deliveries a stopping or killed consumer never started: a message can reach
    ``max_deliveries`` (and be dead-lettered unprocessed, ``DELIVERY_LIMIT``) without ever
    failing if it sat in the buffers of that many dying consumers. Keep ``prefetch`` small
    where consumers restart often, and ``max_deliveries`` above the restarts you expect.
    (RabbitMQ 4.0 changed what the quorum queue counts; check its "Quorum Queues" page.)

    Deliveries are handled one at a time on the connection's thread; run several consumers
    (threads or processes, one connection each) for parallelism. A handler that runs longer
    than the negotiated heartbeat timeout (pika processes heartbeats only between
    deliveries), or than RabbitMQ's ``consumer_timeout`` for an unacked delivery (30 minutes
    by default, "Consumer Acknowledgements and Publisher Confirms", section "Delivery
    Acknowledgement Timeout"), gets its connection or channel closed: the ack then fails
    and the message is redelivered, a duplicate if it had committed.

    :param parameters: an ``amqp://`` URL or ``pika.ConnectionParameters``.
    :param queue: the queue to consume (it must exist).
    :param session_factory: a ``sessionmaker``.
    :param inbox: the inbox to claim in.
    :param consumer_name: this consumer's name (the claim is per consumer name).
    :param handler: ``handler(session, delivery)``, the business change; must not commit.
    :param prefetch: ``basic.qos`` prefetch count: at most this many unacked deliveries in
        this consumer at once (RabbitMQ docs, "Consumer Prefetch"), >= 1; while a run of
        keyless deliveries fills it, the consumer reads on with ``basic.get``.
    :param keyless_wait: seconds without a delivery after which the keyless deliveries
        held (see ``options.max_keyless``) are settled as the producer's, > 0.
    :param options: the settings every consumer shares (:class:`~sa_inbox.brokers.DeliveryOptions`).
        ``key_source``: a header holding the producer's key (a string or UTF-8 bytes; a
        value of another type is dead-lettered ``invalid_message_id``); None: the AMQP
        ``message_id`` property. ``dead_letter``: default
        :func:`~.message.dead_letter_queue_name`. ``max_keyless``: deliveries without the key
        since the last keyed one after which :meth:`run` gives back those it holds
        (``basic.nack(requeue=True)``) and raises :class:`~sa_inbox.exc.MissingKeyHeader`;
        the run is held unacked while deliveries follow one another, and a keyed delivery,
        or ``keyless_wait`` seconds without one (or an empty ``basic.get``), settles those
        held as the producer's (:mod:`sa_inbox.brokers.keys`). ``retry_delay`` is refused:
        RabbitMQ requeues a nacked message at once.
    :raises InvalidArgument: if ``prefetch`` is not an int >= 1, ``options`` is not a
        DeliveryOptions or sets ``retry_delay``.
    :raises ConfigurationError: when it is made, for what it cannot use, before connecting:
        a session factory of the asyncio half or ``Session.begin``
        (:class:`~sa_inbox.exc.InvalidSessionFactory`), an :class:`~sa_inbox.asyncio.AsyncInbox`
        (:class:`~sa_inbox.exc.SyncAsyncMismatch`), a handler that cannot take
        ``(session, delivery)`` (:class:`~sa_inbox.exc.InvalidHandler`).

    **Readiness.** :meth:`run` first runs :meth:`check` (the inbox table exists, the
    session factory makes Sessions, the engine is not autocommit, the handler fits), so a
    consumer set up wrongly fails before it consumes; call :meth:`check` from a health
    endpoint too.
    """

    def __init__(
        self,
        parameters: str | pika.ConnectionParameters,
        queue: str,
        *,
        session_factory: Callable[[], Session],
        inbox: Inbox,
        consumer_name: str,
        handler: Callable[[Session, Delivery], object],
        prefetch: int = DEFAULT_PREFETCH,
        keyless_wait: float = DEFAULT_KEYLESS_WAIT,
        options: DeliveryOptions | None = None,
    ) -> None:
        super().__init__(
            queue,
            prefetch=prefetch,
            keyless_wait=keyless_wait,
            options=options,
            asynchronous=False,
            session_factory=session_factory,
            inbox=inbox,
            consumer_name=consumer_name,
            handler=handler,
        )
        self.parameters = connection_parameters(parameters, "Consumer()")
        self._stop: threading.Event = threading.Event()
        self._connection: Any = None
        self._channel: Any = None
        self._keyless_timer: Any = None
        self.reconnects = Reconnects(f"RabbitMQ consumer of {queue}")
        self.process_options["outage"] = OutageGate(
            consumer_name, hooks=self.readiness.inbox.hooks, sleep=self._outage_sleep
        )

    def check(self) -> None:
        """Check the consumer can process messages (see the class's docstring); returns
        None or raises. Sends one query per table through the session factory.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready`.
        """
        self.readiness.check()

    def run(self) -> None:
        """:meth:`check`, then connect and consume until :meth:`stop`; then close (unacked
        deliveries return).

        A lost connection or channel (the broker restarted or closed it, a missed
        heartbeat, ``consumer_timeout``) is made again with back-off
        (:class:`~sa_inbox.brokers.reconnect.Reconnects`; pika has no reconnect of its
        own): RabbitMQ requeued the deliveries the dead channel held unacked. While the
        database cannot be reached the delivery in hand is held unacked (a quorum queue
        counts every requeue, so it is not nacked) and pika keeps the connection's
        heartbeats going (:mod:`sa_inbox.outage`).

        :raises ConfigurationError: from :meth:`check`, before connecting; from
            :func:`~sa_inbox.brokers.process` (the delivery is left unacked and the
            connection closed); :class:`~sa_inbox.exc.MissingKeyHeader` (see ``max_keyless``).
        :raises pika.exceptions.AMQPError: for what no reconnect can mend: the queue does
            not exist (``ChannelClosedByBroker`` 404), access refused (403), a failed
            login (``ProbableAuthenticationError``); and when the first connection fails
            (``AMQPConnectionError``: a wrong URL, nothing listening).
        """
        if not self.readiness.start(self.process_options["outage"]):
            return
        while not self._stop.is_set():
            try:
                self._consume()
            except (DatabaseUnavailable, pika.exceptions.AMQPError, OSError) as exc:
                if (seconds := self._wait_after(exc)) is None:
                    raise
                self._stop.wait(seconds)

    def _connection_lost(self, exc: BaseException) -> bool:
        return not _fatal(exc)

    def _lost(self, exc: BaseException) -> float:
        self._forget_held()
        return self.reconnects.failed(exc)

    def _consume(self) -> None:
        """One connection: consume until :meth:`stop` or an error; closed after."""
        self._connection = pika.BlockingConnection(self.parameters)
        try:
            channel = self._channel = self._connection.channel()
            channel.confirm_delivery()
            channel.basic_qos(prefetch_count=self.prefetch)
            channel.basic_consume(self.queue, self._on_message)
            self.reconnects.connected()
            # a run of keyless deliveries goes back with the channel: closing it requeues
            # every unacked delivery once (a nack first would let RabbitMQ deliver them to
            # this consumer again: counted twice). What pika received and had not
            # dispatched yet goes back through its basic.cancel, which rejects it before
            # the cancel completes: RabbitMQ may deliver it once more in between.
            self._streak.stop_deliveries = channel.close
            if not self._stop.is_set():
                channel.start_consuming()
        finally:
            self._cancel_keyless_timer()
            if self._connection.is_open:
                with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                    self._connection.close()

    def _forget_held(self) -> None:
        """The held keyless deliveries died with their channel (RabbitMQ requeued them)."""
        self._streak.release()
        self._keyless_timer = None

    def _outage_sleep(self, seconds: float) -> bool:
        """The outage gate's wait: pika's ``connection.sleep`` (heartbeats and other I/O
        go on; no delivery is dispatched inside a callback), cut short by :meth:`stop`;
        before the first connection (the start-up check), a plain wait."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if self._connection is None:
                self._stop.wait(min(left, 0.25))
            else:
                self._connection.sleep(min(left, 0.25))
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop consuming after the current delivery; safe from any thread (pika's
        ``BlockingConnection.add_callback_threadsafe``, the only thread-safe pika call).
        :meth:`run` then closes the connection and returns. A stopped consumer stays stopped:
        make a new one to consume again."""
        self._stop.set()
        connection, channel = self._connection, self._channel
        if connection is None or channel is None:
            return  # run() checks the event before it starts consuming
        with contextlib.suppress(pika.exceptions.ConnectionWrongStateError):
            connection.add_callback_threadsafe(channel.stop_consuming)  # closed: returning

    def _on_message(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        self._cancel_keyless_timer()
        self._offer(channel, method, properties, body)
        while self.holds_every_slot:  # read on past the prefetch count
            method, properties, body = channel.basic_get(self.queue)
            if method is None:  # the queue is empty: the run is short
                flush(self._streak, self._process)
                break
            self._offer(channel, method, properties, body)
        if self._streak.held:
            self._keyless_timer = self._connection.call_later(self.keyless_wait, self._flush)

    def _offer(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        delivery = pika_delivery(method, properties, body, self.key_header)
        settler = PikaSettler(
            channel,
            method,
            properties,
            body,
            queue=self.queue,
            dead_letter_queue=self.dead_letter_queue,
        )
        offer(self._streak, delivery, settler, self._process)

    def _process(self, delivery: Delivery, settler: PikaSettler) -> None:
        process(delivery, settler, **self.process_options)

    def _flush(self) -> None:
        """No delivery for ``keyless_wait``: the held keyless ones are a short run."""
        self._keyless_timer = None
        flush(self._streak, self._process)

    def _cancel_keyless_timer(self) -> None:
        if self._keyless_timer is not None:
            with contextlib.suppress(Exception):  # the connection may be gone
                self._connection.remove_timeout(self._keyless_timer)
            self._keyless_timer = None


def _fatal(exc: BaseException) -> bool:
    """Whether no reconnect can mend ``exc``: a failed login, or a channel or connection
    closed for the consumer's own settings (see
    :func:`~.consumer.is_configuration_close`), or a dead letter the broker could not route
    (the dead-letter queue does not exist)."""
    if isinstance(
        exc,
        pika.exceptions.ProbableAuthenticationError
        | pika.exceptions.ProbableAccessDeniedError
        | pika.exceptions.UnroutableError,
    ):
        return True
    if isinstance(exc, pika.exceptions.ChannelClosed | pika.exceptions.ConnectionClosed):
        return is_configuration_close(exc.reply_code)
    return False
