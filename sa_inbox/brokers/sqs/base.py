"""The half the boto3 and aiobotocore consumers share: construction, checks, and the
decisions of one receive (which messages run, which wait for their FIFO group)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from ...claim import Inbox
from ...exc import ConfigurationError, DatabaseUnavailable, MissingKeyHeader
from ...outage import OutageGate
from ..delivery import Delivery, Disposition, Settlement
from ..keys import KeylessStreak
from ..options import DeliveryOptions, options_of
from ..reconnect import Reconnecting, Reconnects
from ..startup import check_consumer, default_name
from .core import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_RETRY_DELAY,
    DEFAULT_VISIBILITY_TIMEOUT,
    DEFAULT_WAIT_TIME,
    Held,
    QueueInfo,
    QueueSettings,
    SqsSettler,
    Step,
    check_client,
    delivery_of,
    is_connection_error,
    is_missing_queue,
    queue_name,
)
from .message import DEFAULT_KEY_ATTRIBUTE, Received

__all__ = ["PASS_ERRORS", "ConsumerBase", "FifoGroups", "settle_each"]

#: What may end one pass of a consumer's loop for :meth:`ConsumerBase._wait_after` to judge:
#: an outage, SQS's and botocore's errors, and the queue's ConfigurationError (a queue
#: missing on a server restarted without its state is a lost connection).
PASS_ERRORS = (DatabaseUnavailable, ClientError, BotoCoreError, ConfigurationError)

ClientT = TypeVar("ClientT")
SessionT = TypeVar("SessionT")


class FifoGroups:
    """The FIFO message groups of one receive that wait: a message whose handling failed
    (handed back for a retry, or left unsettled) keeps the later messages of its group out
    of this receive. They are made visible again unprocessed, and SQS returns none of the
    group until the failed one is received again (it is first in its group), so the group's
    order holds; the other groups go on. Each of them is counted again by SQS at its next
    receive."""

    def __init__(self, messages: Sequence[Received], queue: str) -> None:
        self._group = {f"{queue}/{m.message_id}": m.group_id for m in messages}
        self.blocked: set[str] = set()

    def waits(self, message: Received) -> bool:
        return message.group_id is not None and message.group_id in self.blocked

    def block(self, message: Received) -> None:
        if message.group_id is not None:
            self.blocked.add(message.group_id)

    def settled(self, settlements: Sequence[Settlement]) -> None:
        """Block the group of each settlement that left its message in the queue."""
        for settlement in settlements:
            if settlement.disposition is Disposition.RETRY:
                group = self._group.get(settlement.delivery.broker_ref)
                if group is not None:
                    self.blocked.add(group)


#: What :func:`settle_each` yields: whether to offer the message (else give it back), and it.
Each = tuple[bool, Received]


def settle_each(messages: Sequence[Received], queue: str) -> Generator[Each, Any, list[Settlement]]:
    """A receive's messages in order, as a step (:mod:`..steps`): yields ``(True, message)``
    to offer it and gets its settlements back; yields ``(False, message)`` to give it back
    unprocessed: its FIFO group waits (:class:`FifoGroups`), or a
    :class:`~sa_inbox.exc.MissingKeyHeader` thrown in stopped the consumer (then re-raised).
    Returns the settlements."""
    groups = FifoGroups(messages, queue)
    settled: list[Settlement] = []
    for n, message in enumerate(messages):
        if groups.waits(message):
            yield False, message
            continue
        try:
            now = yield True, message
        except MissingKeyHeader:
            for rest in messages[n + 1 :]:
                yield False, rest
            raise
        groups.settled(now)
        settled += now
    return settled


class ConsumerBase(Reconnecting, abc.ABC, Generic[ClientT, SessionT]):
    """Consume one SQS queue exactly once in effect.

    Each received message becomes a :class:`~sa_inbox.brokers.Delivery` keyed on the
    producer's message attribute ``options.key_source`` (never SQS's ``MessageId`` or receipt
    handle, which change with each send and each receive) and goes through
    :func:`sa_inbox.brokers.process` (:func:`~sa_inbox.brokers.process_async`): claim,
    ``handler(session, delivery)``, commit; the receive's committed messages are then
    deleted with ``DeleteMessageBatch``. The delivery count is ``ApproximateReceiveCount``.

    **Visibility.** Messages are received hidden for ``visibility_timeout`` seconds. With
    ``heartbeat`` on, every message held (waiting in its receive or in its handler) has its
    visibility set to ``visibility_timeout`` again every third of it
    (``ChangeMessageVisibilityBatch``), so a slow handler keeps its message and no second
    worker receives it meanwhile. With ``heartbeat`` off, a handler that runs past the
    timeout lets SQS hand the message to another worker: both run it, the inbox claim lets
    exactly one commit, the other skips it as a duplicate. A receipt handle gone stale so
    (SQS refusing the extension, the delete or the hand-back; or accepting a delete that
    does not delete, as AWS documents) is logged, never raised: the message comes back and
    is skipped as a duplicate once committed.

    **Failures and dead letters.** A failed message is hidden
    ``options.retry_delay(receive count)`` seconds (``ChangeMessageVisibility``) and comes
    back then. Its dead-letter path is either the consumer's or the queue's:

    - ``options.dead_letter`` given: after ``options.max_deliveries`` (default 5) the
      message is sent there with its reason (the attribute ``sa_inbox_dead_letter``, a JSON
      object) and deleted; a message without its key, at once. The queue may also have a
      redrive policy (SQS then moves a message still coming back after ``maxReceiveCount``
      receives);
    - no ``options.dead_letter``: the queue's redrive policy is the path, and
      ``max_deliveries`` is its ``maxReceiveCount``: a message to dead-letter is made
      visible again and SQS moves it at its next receive (its reason is logged only). A
      queue with neither is refused at start: a poison message would come back for the
      queue's whole retention period.

    **FIFO queues** keep each ``MessageGroupId``'s order: the messages of a receive run in
    order, and a failed one keeps the later messages of its group (only) out of the receive
    (see :class:`FifoGroups`), as SQS keeps its group waiting until it is received again.

    **The key.** ``options.key_source`` names a message attribute of data type ``String``
    (or ``Binary`` holding UTF-8); a ``Number`` attribute is no key (dead-lettered
    ``invalid_message_id``). ``deduplication_id_key=True`` takes the key from the FIFO
    ``MessageDeduplicationId`` instead: use it only when every producer sets that id itself,
    once per message. It is the producer's only then: on a queue with content-based
    deduplication SQS makes it the SHA-256 of the body, so two messages with the same body
    (two equal payments) would be one, and the second would be skipped silently; such a
    queue, and a standard queue (no such id), are refused at start.

    **Outages and reconnects.** Every receive increments ``ApproximateReceiveCount`` and
    nothing can undo it, so while the database cannot be reached the consumer receives
    nothing: the message in hand is held uncounted by the consumer's
    :class:`~sa_inbox.outage.OutageGate`, and the visibility of every message held is set
    again every third of ``visibility_timeout``, so none shows again to be received and
    counted. What cannot be avoided: the receive that brought the messages counted once (it
    was made before the outage was known); a consumer killed during the outage leaves its
    messages to show again, counted; an outage longer than the 12 hours SQS lets a message
    stay hidden lets them show, counted. A lost connection to SQS (refused, reset, 5xx) is
    waited out with back-off (:class:`~sa_inbox.brokers.reconnect.Reconnects`): one WARNING
    when it is lost, one INFO when it is back; what was held shows again after its
    visibility timeout, counted, and a committed one is a duplicate. A queue missing just
    after a lost connection (an emulator restarted without its state) is part of the loss.

    :param client: a boto3 SQS client (``boto3.client("sqs")``); for the asyncio consumer,
        an aiobotocore one (entered: ``async with session.create_client("sqs") as c``).
    :param queue: the queue's name or URL.
    :param session_factory: a ``sessionmaker`` (``async_sessionmaker`` for asyncio).
    :param inbox: the inbox to claim in.
    :param handler: ``handler(session, delivery)``, the business change (must not commit;
        ``async def`` for asyncio).
    :param consumer_name: the inbox's consumer name; default the queue's name.
    :param deduplication_id_key: key on the FIFO ``MessageDeduplicationId`` (see above).
    :param visibility_timeout: seconds a received message stays hidden, a whole number from
        1 to 43,200 (SQS takes integers).
    :param heartbeat: keep the visibility of held messages up while they wait and run.
    :param wait_time: seconds one receive long-polls (0-20); a stop is seen within it.
    :param batch_size: messages per receive (1-10).
    :param options: the settings every consumer shares
        (:class:`~sa_inbox.brokers.DeliveryOptions`). ``key_source``: the message attribute
        holding the producer's key (default ``message_id``). ``dead_letter``: the
        dead-letter queue's name or URL, or None for the queue's redrive policy (see above).
        ``max_deliveries``: receives allowed before a dead letter (see above).
        ``retry_delay``: ``delay(receive count) -> seconds`` a failed message stays hidden
        (default 1 s doubling to 60 s; rounded up to whole seconds). ``max_keyless``:
        consecutive messages without the key after which they are all made visible again
        unprocessed and :class:`~sa_inbox.exc.MissingKeyHeader` is raised (a misspelled
        ``key_source``); fewer are dead-lettered ``missing_message_id``.
    :raises InvalidArgument: for invalid settings (see
        :class:`~sa_inbox.brokers.sqs.core.QueueSettings`), before any request.
    :raises SyncAsyncMismatch: when it is made, for a client of the other half (an
        aiobotocore client for the sync consumer, a boto3 client for the asyncio one;
        :func:`~sa_inbox.brokers.sqs.core.check_client`).
    :raises ConfigurationError: when it is made, before any request or SQL, for objects it
        cannot use (:func:`sa_inbox.brokers.startup.check_consumer`: a session factory of
        the other half, an asyncio inbox given to the sync consumer, a handler that cannot
        take ``(session, delivery)``); at start, for the queue's findings
        (:func:`~sa_inbox.brokers.sqs.core.resolve`) and the database's
        (:func:`sa_inbox.readiness.check_ready`).
    """

    #: True for the asyncio consumer (its session factory, inbox and handler).
    asynchronous = False

    def __init__(
        self,
        client: ClientT,
        queue: str,
        *,
        session_factory: Callable[[], SessionT],
        inbox: Inbox,
        handler: Callable[[SessionT, Delivery], Any],
        consumer_name: str | None = None,
        deduplication_id_key: bool = False,
        visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT,
        heartbeat: bool = True,
        wait_time: int = DEFAULT_WAIT_TIME,
        batch_size: int = DEFAULT_BATCH_SIZE,
        options: DeliveryOptions | None = None,
    ) -> None:
        entry = f"{type(self).__name__}()"
        shared = options_of(options, entry)
        key_attribute = shared.key(DEFAULT_KEY_ATTRIBUTE)
        self.settings = QueueSettings(
            queue,
            key_attribute,
            bool(deduplication_id_key),
            shared.dead_letter,
            visibility_timeout,
            bool(heartbeat),
            wait_time,
            batch_size,
            shared.max_deliveries,
            shared.delay(DEFAULT_RETRY_DELAY),
        )
        check_client(client, asynchronous=self.asynchronous, entry=entry)
        name = default_name(consumer_name, queue_name(queue))
        self.readiness = check_consumer(
            entry,
            session_factory=session_factory,
            inbox=inbox,
            handler=handler,
            consumer_name=name,
            max_deliveries=shared.limit(),
            asynchronous=self.asynchronous,
        )
        self.client = client
        self.held = Held()
        #: The queue as found at start (None until then, and after a lost connection).
        self.info: QueueInfo | None = None
        key = "MessageDeduplicationId" if deduplication_id_key else key_attribute
        self._streak = KeylessStreak(key, shared.max_keyless)
        self.reconnects = Reconnects(f"SQS consumer of {queue_name(queue)}")
        self._process_kw: dict[str, Any] = {
            "session_factory": session_factory,
            "inbox": self.readiness.inbox,
            "consumer_name": name,
            "handler": handler,
            "max_deliveries": shared.limit(),
            "on_settled": shared.on_settled,
            "outage": OutageGate(
                name,
                hooks=self.readiness.inbox.hooks,
                sleep=self._outage_sleep,
                keep_alive=self._keep_alive,
                keep_alive_every=self.settings.heartbeat_every,
            ),
        }
        self._stop = self._stop_event()

    @property
    def gate(self) -> OutageGate:
        """The consumer's outage gate."""
        gate: OutageGate = self._process_kw["outage"]
        return gate

    def _found(self, info: QueueInfo) -> QueueInfo:
        self.info = info
        self._process_kw["max_deliveries"] = info.max_deliveries
        return info

    def _settler(
        self, info: QueueInfo, message: Received, run: Callable[[Step[Any]], Any]
    ) -> tuple[Delivery, SqsSettler]:
        delivery = delivery_of(self.settings, info, message)
        return delivery, SqsSettler(info, self.settings, self.held, message, delivery, run)

    def _connection_lost(self, exc: BaseException) -> bool:
        """A connection error, or (while the connection is lost) a missing queue, raised
        or behind the start's :class:`~sa_inbox.exc.ConfigurationError`: a server
        restarted without its state."""
        missing = is_missing_queue(exc) or is_missing_queue(exc.__cause__)
        return is_connection_error(exc) or (self.reconnects.lost and missing)

    def _lost(self, exc: BaseException) -> float:
        """A lost connection: what is held shows again after its visibility timeout; the
        queue is found again on the next poll. The seconds to wait."""
        self._streak.release()
        self.held.clear()
        self.info = None
        return self.reconnects.failed(exc)

    def _release_unsettled(self, messages: Sequence[Received]) -> None:
        """Stop keeping up ``messages`` still held (a poll that raised): they show again
        after their visibility timeout; the keyless ones the streak holds stay held."""
        kept = {id(s.message) for _, s in self._streak.held}
        for message in messages:
            if id(message) not in kept:
                self.held.drop(message)

    @abc.abstractmethod
    def _stop_event(self) -> Any:
        """The event :meth:`stop` sets (``threading.Event`` / ``asyncio.Event``)."""

    @abc.abstractmethod
    def _outage_sleep(self, seconds: float) -> Any:
        """The outage gate's wait, cut short by a stop."""

    @abc.abstractmethod
    def _keep_alive(self) -> Any:
        """Set the visibility of every held message again (the outage gate's keep-alive)."""

    def stop(self) -> None:
        """Ask ``run()`` to return after the receive in hand (for the sync consumer, from
        any thread)."""
        self._stop.set()
