"""The asyncio Kafka consumer, on aiokafka: :class:`AsyncConsumer`.

aiokafka rules relied on (aiokafka docs, "Consumer client": "Manual commit",
"Local state and storing offsets outside of Kafka", ``ConsumerRebalanceListener``), each
checked against Tansu by ``tests/backends/brokers/test_kafka.py``:

- ``getmany()`` returns the records fetched since the last call, per partition, in offset
  order; ``seek(tp, offset)`` makes the next fetch of ``tp`` start at ``offset`` and drops
  the records of ``tp`` fetched before it;
- ``commit({tp: offset})`` stores ``offset`` (the *next* record to consume) for the group,
  under the member's generation: the coordinator refuses it (``CommitFailedError``) once
  the group rebalanced without the member;
- the listener's ``on_partitions_revoked`` is awaited before the member rejoins (the
  partitions are still its own and may be committed), ``on_partitions_assigned`` after the
  new assignment. Not before its first fetch: the assignment is live (``getmany`` returns
  its records) before the listener is called, and the fetcher looks up the group's
  committed offset, or resets the partition (``auto_offset_reset``), while the listener
  awaits (aiokafka 0.14 ``GroupCoordinator._on_join_complete``,
  ``Fetcher._update_fetch_positions``). A ``seek`` there drops the records buffered
  before it, not those a ``getmany`` already returned: with ``offsets="database"`` the
  stored offsets are floors, below which fetched records are dropped
  (:class:`~.core.Assignment`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import TopicPartition
from sqlalchemy.ext.asyncio import AsyncSession

from ...exc import DatabaseUnavailable, InvalidArgument
from ...outage import OutageGate, probe_sessions
from ..delivery import DeadLetterReason, Delivery
from ..reconnect import sleep_unless
from .core import (
    ConsumerCore,
    Settled,
    dead_letter_headers,
)
from .poll import PollRunner
from .records import Record, make_record

__all__ = ["AsyncConsumer", "client_options"]

logger = logging.getLogger("sa_inbox.brokers.kafka")

Position = tuple[str, int]

#: Seconds an offset commit may take: aiokafka retries a commit for as long as the
#: coordinator cannot be reached; past this the connection is taken for lost (the records
#: come again, as duplicates).
COMMIT_TIMEOUT = 15.0

#: Seconds a fetch may wait for a rebalance in progress before the loop looks at its stop.
REBALANCE_WAIT = 1.0

#: aiokafka consumer options the adapter sets itself (refused in ``config``).
OWN_OPTIONS = ("group_id", "enable_auto_commit", "bootstrap_servers", "isolation_level")


def client_options(config: Mapping[str, Any] | None, *, entry: str) -> dict[str, Any]:
    """``config`` checked: the aiokafka options the user may set.

    :raises InvalidArgument: for an option the adapter sets itself (``group_id``,
        ``enable_auto_commit``: offsets are committed only after the database commit).
    """
    options = dict(config or {})
    taken = sorted(set(options) & set(OWN_OPTIONS))
    if taken:
        raise InvalidArgument(
            f"{entry}: config may not set {taken}: the consumer sets them (the group is "
            "group_id=..., offsets are committed only after the database commit)"
        )
    check_options(AIOKafkaConsumer, options, "config", entry)
    return options


def check_options(client: type, options: Mapping[str, Any], name: str, entry: str) -> None:
    """Refuse an option ``client``'s constructor does not take (aiokafka's clients take
    keyword arguments, not a properties dict: ``auto_offset_reset``, not
    ``auto.offset.reset``).

    :raises InvalidArgument: naming the options unknown to ``client``.
    """
    accepted = inspect.signature(client).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidArgument(
            f"{entry}: {name} has options {client.__name__} does not take: {unknown} "
            "(aiokafka's keyword names, such as auto_offset_reset)"
        )


class AsyncConsumer(ConsumerCore[AsyncSession]):
    """Consume Kafka topics through a consumer group, exactly once in effect (asyncio).

    Each poll (``getmany``, at most ``max_records``) is claimed and handled in **one
    database transaction** (:mod:`sa_inbox.brokers.kafka.poll`); after its commit, each
    partition's offset is committed as a contiguous watermark (never past a record to retry
    or held). Kafka keeps no delivery count: failed attempts are counted in the
    ``inbox_kafka_attempts`` table, and at ``max_deliveries`` the record goes to the
    dead-letter topic, so its partition moves on. The key is the producer's header
    ``options.key_source``, never the record's topic, partition or offset.

    Example::

        consumer = AsyncConsumer(
            "payments", bootstrap_servers="localhost:9092", group_id="billing",
            session_factory=async_sessionmaker(engine), inbox=inbox, handler=apply,
        )
        await consumer.run()  # until consumer.stop()

    :param topics: the topic, or topics, to consume.
    :param bootstrap_servers: ``host:port[,host:port]``.
    :param group_id: the consumer group (every process of this consumer uses the same).
    :param session_factory: an ``async_sessionmaker``.
    :param inbox: the :class:`~sa_inbox.Inbox` (or its AsyncInbox); its MetaData gets the
        adapter's tables (:func:`~sa_inbox.brokers.kafka.kafka_tables`): create them with it.
    :param handler: ``async def handler(session, delivery)``, the business change; it must
        not commit, and may run again for the same record if its poll's transaction is
        rolled back (another record failed, a deadlock).
    :param consumer_name: the inbox's consumer name; default ``group_id``.
    :param offsets: ``"kafka"`` (the default): committed to the group after the database
        commit; a consumer killed between the two replays the poll (duplicates, skipped).
        ``"database"``: also stored in the poll's own transaction (the
        ``inbox_kafka_offsets`` table), read when partitions are assigned and sought to;
        a consumer killed between the database commit and the offset commit replays
        nothing. Each stored offset is its partition's floor for the assignment: records
        aiokafka fetched below it (from the group's committed offset, or its
        ``auto_offset_reset``, before the listener's seek) are dropped before the claim
        and the partition sought to the floor again (:class:`~.core.Assignment`).
    :param max_records: records per poll (one transaction), >= 1.
    :param poll_timeout: seconds one fetch waits (a stop is seen within it).
    :param config: more aiokafka ``AIOKafkaConsumer`` options (``session_timeout_ms``,
        ``auto_offset_reset``, default ``"earliest"``, security settings); the options
        the adapter sets are refused.
    :param options: the settings every consumer shares
        (:class:`~sa_inbox.brokers.DeliveryOptions`). ``key_source``: the header of the
        producer's key (default ``message_id``); a name of the record's coordinates
        (``offset``, ``partition``, ``topic``) is refused. ``dead_letter``: the dead-letter
        topic (default ``<topic>.dead``). ``max_deliveries``: attempts per message before
        its dead letter. ``max_keyless``: keyless records in a row after which :meth:`run`
        raises :class:`~sa_inbox.exc.MissingKeyHeader` with none of them dead-lettered or
        committed (a misspelled ``key_source``); fewer are dead-lettered
        ``missing_message_id``. ``retry_delay`` is refused: a failed record is fetched again
        at the next poll, in its partition's order.
    :param producer_config: options of the ``AIOKafkaProducer`` that publishes dead letters
        (``acks="all"`` by default). Its idempotent producer is off by default: Tansu 0.6.0
        answers aiokafka's ``InitProducerId`` with an unknown error (librdkafka's works).
        A dead letter published twice (a consumer killed between the publish and the
        commit) carries the same ``sa-inbox-message-id`` header.
    :raises ConfigurationError: when made, before any connection or SQL: objects of the
        wrong kind or half (:func:`sa_inbox.brokers.startup.check_consumer`), an invalid
        ``offsets``, ``max_records``, ``poll_timeout``, ``config`` or ``options``
        (:class:`~sa_inbox.exc.InvalidArgument`).

    **Rebalances.** The revocation waits for the poll in hand: its transaction commits and
    its offsets are committed before the partitions go (or, during a database outage, it is
    abandoned uncommitted, and the new owner fetches the records again). Records fetched
    before a rebalance are never committed after it. A member that lost its partitions
    without knowing (a zombie past ``max_poll_interval_ms``) may still commit its
    transaction: the claim makes its records and its successor's one effect each, and the
    database offsets never move back.

    **Outages and reconnects.** While the database cannot be reached the poll in hand is
    held, uncounted, and run again once a probe gets through (:mod:`sa_inbox.outage`);
    aiokafka keeps the membership alive meanwhile (its heartbeat runs in the background)
    up to ``max_poll_interval_ms``. A lost broker connection is aiokafka's to make again;
    :meth:`run` logs one WARNING when a fetch or a commit fails for it, waits with
    back-off (:class:`~sa_inbox.brokers.reconnect.Reconnects`), and one INFO once it
    fetches again.
    """

    asynchronous = True

    def _client_configs(
        self, bootstrap_servers: str, config: dict[str, Any], producer_config: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        consumer = {"auto_offset_reset": "earliest", **client_options(config, entry=self.entry)}
        check_options(AIOKafkaProducer, producer_config, "producer_config", self.entry)
        return consumer, {"acks": "all", **producer_config}

    def _client_state(self) -> None:
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self._stopped = False
        self._revoking = False
        self._lock: asyncio.Lock | None = None
        self._runner: PollRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def check(self) -> None:
        """The start-up check :meth:`run` makes first (the inbox's and the adapter's
        tables exist, the session factory makes AsyncSessions, the handler fits, the
        consumer name's owner); returns None or raises, for a health endpoint.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready_async`.
        """
        await self.readiness.check_async()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the poll in hand (from the event loop's thread)."""
        self._stopped = True

    def _stopping(self) -> bool:
        extra = self._extra_stop
        return self._stopped or (extra is not None and extra.is_set())

    async def run(self, stop: Any = None) -> None:
        """:meth:`check` (waiting out a database that cannot be reached), join the group,
        then poll and settle until :meth:`stop` is called or ``stop`` (an
        :class:`asyncio.Event`, or a :class:`threading.Event`) is set; the poll in hand is
        settled first, then the member leaves the group.

        :raises ConfigurationError: from :meth:`check` before the group is joined; from a
            poll, with nothing of it committed.
        :raises MissingKeyHeader: see ``options.max_keyless``.
        :raises KafkaError: if the first connection to the broker fails.
        """
        self._extra_stop = stop
        starting = OutageGate(
            self.consumer_name, hooks=self.inbox.hooks, sleep=self._sleep_unless_stopped
        )
        if not await self.readiness.start_async(starting):
            return
        from ...asyncio._bridge import sync_session_factory

        self._lock = asyncio.Lock()
        self._runner = self._poll_runner(sync_session_factory(self.session_factory))
        await self._connect()
        try:
            while not self._stopping():
                await self._poll_once()
        finally:
            await self._close()

    async def _connect(self) -> None:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers, **self.producer_config
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            **self.config,
        )
        self.consumer.subscribe(list(self.topics), listener=_Listener(self))
        try:
            await self.producer.start()
            await self.consumer.start()
        except BaseException:
            await self._close()
            raise
        self.reconnects.connected()

    async def _close(self) -> None:
        for client in (self.consumer, self.producer):
            if client is not None:
                try:
                    await client.stop()
                except KafkaError as exc:  # a broker gone: nothing to leave
                    logger.debug("closing %s: %s", type(client).__name__, exc)
        self.consumer = self.producer = None

    # -- one poll ----------------------------------------------------------------------

    async def _poll_once(self) -> None:
        assert self.consumer is not None and self._lock is not None
        try:
            # getmany waits without a timeout while the group rebalances ("fetched_records":
            # no records of a partition that may not be this member's): bounded here, so
            # a stop is seen within it.
            fetched = await asyncio.wait_for(
                self.consumer.getmany(
                    timeout_ms=round(self.poll_timeout * 1000), max_records=self.max_records
                ),
                self.poll_timeout + REBALANCE_WAIT,
            )
        except TimeoutError:
            return  # rebalancing: nothing fetched, nothing held is decided
        except KafkaError as exc:
            await self._lost(exc)
            return
        async with self._lock:  # after an assignment's floors are set (_assign)
            epoch = self.assignment.epoch
            records, floors = self.admit(
                [
                    make_record(
                        tp.topic,
                        tp.partition,
                        msg.offset,
                        msg.value,
                        msg.key,
                        msg.headers,
                        key_header=self.key_header,
                    )
                    for tp, msgs in fetched.items()
                    for msg in msgs
                ]
            )
            for (topic, partition), offset in floors.items():
                self.consumer.seek(TopicPartition(topic, partition), offset)
            try:
                settled = await self._settle(records)
            except DatabaseUnavailable:
                if self._stopping() or self._revoking:
                    return  # abandoned: nothing of the poll committed
                raise
            await self._commit(settled, epoch)

    async def _settle(self, records: list[Record]) -> Settled:
        from ...asyncio._bridge import in_greenlet

        assert self._runner is not None
        return await in_greenlet(self.settle, records, self._runner)

    async def _commit(self, settled: Settled, epoch: int) -> None:
        """Seek the partitions to retry, then commit the watermarks (partitions still owned
        under the same assignment only)."""
        assert self.consumer is not None
        offsets = self.assignment.committable(epoch, settled.commit)
        for (topic, partition), offset in settled.seek.items():
            if (topic, partition) in offsets:
                self.consumer.seek(TopicPartition(topic, partition), offset)
        if not offsets:
            return
        try:
            await asyncio.wait_for(
                self.consumer.commit(
                    {TopicPartition(t, p): offset for (t, p), offset in offsets.items()}
                ),
                COMMIT_TIMEOUT,
            )
            self.reconnects.connected()
        except CommitFailedError as exc:
            logger.warning(
                "consumer %s: offsets not committed, the group rebalanced (%s); the records "
                "come again to their partitions' owners, as duplicates",
                self.consumer_name,
                exc,
                extra={"action": "commit_failed"},
            )
        except (KafkaError, TimeoutError) as exc:
            await self._lost(exc)

    async def _lost(self, exc: BaseException) -> None:
        if not self.reconnects.ever_connected:
            raise exc
        await self._sleep_unless_stopped(self.reconnects.failed(exc))

    # -- the runner's edges (called in the greenlet) -------------------------------------

    def _poll_runner(self, sync_factory: Callable[[], Any]) -> PollRunner:
        from ...asyncio._bridge import async_session_of, call_handler_awaiting, call_on_loop

        handler = self.handler

        def run_handler(session: Any, delivery: Delivery) -> Any:
            return call_handler_awaiting(handler, async_session_of(session), delivery)

        def dead_letter(record: Record, reason: DeadLetterReason, detail: str) -> None:
            call_on_loop(self._publish_dead_letter(record, reason, detail))

        def sleep(seconds: float) -> bool:
            return bool(call_on_loop(self._sleep_unless_stopped(seconds, revoking=True)))

        from ...asyncio._bridge import loop_sleep

        return PollRunner(
            session_factory=sync_factory,
            inbox=self.inbox,
            consumer_name=self.consumer_name,
            handler=run_handler,
            max_deliveries=self.max_deliveries,
            attempts=self.attempts,
            offsets=self.offsets,
            dead_letter=dead_letter,
            gate=OutageGate(self.consumer_name, hooks=self.inbox.hooks, sleep=sleep),
            probe=probe_sessions(sync_factory),
            sleep=loop_sleep,
        )

    async def _publish_dead_letter(
        self, record: Record, reason: DeadLetterReason, detail: str
    ) -> None:
        assert self.producer is not None
        await self.producer.send_and_wait(
            self.dead_letter_topic_of(record),
            value=record.value,
            key=record.key,
            headers=dead_letter_headers(record, reason, detail),
        )

    async def _sleep_unless_stopped(self, seconds: float, *, revoking: bool = False) -> bool:
        """Wait ``seconds``, less once stopped (or, with ``revoking``, once the partitions
        are being revoked: the poll in hand is then abandoned); whether it was."""

        def ended() -> bool:
            return self._stopping() or (revoking and self._revoking)

        return await sleep_unless(ended, seconds)

    # -- rebalances --------------------------------------------------------------------

    async def _revoke(self, revoked: Iterable[TopicPartition]) -> None:
        assert self._lock is not None
        self._revoking = True
        try:
            async with self._lock:  # the poll in hand finishes (or is abandoned) first
                self.revoked((tp.topic, tp.partition) for tp in revoked)
        finally:
            self._revoking = False

    async def _assign(self, assigned: Iterable[TopicPartition]) -> None:
        """The partitions are this member's; with ``offsets="database"``, their stored
        offsets are read, kept as their floors (:class:`~.core.Assignment`) and sought to.

        The floors are set under the poll lock before the partitions count as owned: a poll
        whose records aiokafka fetched from the group's committed offset (or its
        ``auto_offset_reset``) while the database was read waits for them, and
        :meth:`~.core.ConsumerCore.admit` then drops those below the floor.
        """
        positions = [(tp.topic, tp.partition) for tp in assigned]
        if self.offsets is None or not positions:
            self.assigned(positions)
            return
        assert self._lock is not None
        async with self._lock:
            stored = await self._read_stored_offsets(positions)
            self.assigned(positions, stored)
            assert self.consumer is not None
            for (topic, partition), offset in stored.items():
                self.consumer.seek(TopicPartition(topic, partition), offset)

    async def _read_stored_offsets(self, positions: list[Position]) -> dict[Position, int]:
        from ...asyncio._bridge import in_greenlet, sync_session_factory

        factory = sync_session_factory(self.session_factory)

        def read() -> dict[Position, int]:
            with factory() as session:
                return self.stored_offsets(session, positions)

        try:
            return await in_greenlet(read)
        except Exception as exc:  # the group's committed offsets, behind the database's
            self.offsets_unread(exc)
            return {}


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """The consumer's rebalance listener (aiokafka awaits both methods)."""

    def __init__(self, consumer: AsyncConsumer) -> None:
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.consumer._revoke(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self.consumer._assign(assigned)
