"""The synchronous Kafka consumer, on confluent-kafka (librdkafka): :class:`Consumer`.

librdkafka rules relied on (confluent-kafka's API reference, ``Consumer``; librdkafka's
CONFIGURATION.md), each checked against Tansu by ``tests/backends/brokers/test_kafka.py``:

- ``consume(num_messages, timeout)`` returns the records fetched, per partition in offset
  order; the rebalance callbacks (``on_assign``, ``on_revoke``, ``on_lost``) run inside
  ``consume()``, on the caller's thread: never while a poll of this consumer is being
  handled;
- with ``enable.auto.commit=false`` nothing is committed but what ``commit(offsets=...)``
  names, each offset the *next* record to consume; ``seek()`` makes the next fetch of a
  partition start at an offset;
- an ``on_assign`` callback that calls ``assign(partitions)`` with offsets set starts each
  partition there.

**Tansu.** Tansu's group coordinator holds a ``JoinGroup`` for half the member's session
timeout while the group forms (``tansu-broker/src/coordinator/group/administrator.rs``,
``join``: "elapsed_ms < session_timeout_ms / 2"), so with librdkafka's default
``session.timeout.ms`` of 45 s a consumer's first assignment comes after 22.5 s, and each
rebalance costs as long: a short ``session.timeout.ms`` (6 s in the tests) makes it 3 s.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from sqlalchemy.orm import Session

from ...exc import DatabaseUnavailable, InvalidArgument
from ...outage import OutageGate, probe_sessions
from ..delivery import DeadLetterReason
from .core import (
    ConsumerCore,
    Settled,
    dead_letter_headers,
)
from .poll import PollRunner
from .records import Record, make_record

__all__ = ["Consumer"]

logger = logging.getLogger("sa_inbox.brokers.kafka")

Position = tuple[str, int]

#: librdkafka properties the adapter sets itself (refused in ``config``).
OWN_PROPERTIES = (
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "bootstrap.servers",
    "on_commit",
    "error_cb",
)

#: Commit errors that say the group rebalanced without this member: the records come again
#: to their partitions' owners.
_REBALANCED = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError._ASSIGNMENT_LOST,
        KafkaError._STATE,
    }
)
#: Global errors that say the brokers cannot be reached.
_UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


class Consumer(ConsumerCore[Session]):
    """Consume Kafka topics through a consumer group, exactly once in effect (threads).

    Everything :class:`~sa_inbox.brokers.kafka.AsyncConsumer` does, on confluent-kafka's
    ``Consumer``, with a ``sessionmaker`` and a plain ``handler(session, delivery)``; its
    parameters are the same but for:

    :param config: more librdkafka consumer properties (``session.timeout.ms``,
        ``auto.offset.reset``, default ``earliest``, security settings); the properties
        the adapter sets are refused.
    :param producer_config: more properties of the producer of dead letters (``acks=all``
        and ``enable.idempotence=true`` by default).

    Example::

        consumer = Consumer(
            "payments", bootstrap_servers="localhost:9092", group_id="billing",
            session_factory=sessionmaker(engine), inbox=inbox, handler=apply,
        )
        with stop_on_signals(consumer.stop):  # sa_inbox.brokers: SIGTERM, SIGINT
            consumer.run()

    **Rebalances.** librdkafka runs the rebalance callbacks inside ``consume()``, between
    two polls: the poll in hand has been committed (database, then offsets) before its
    partitions can be revoked. Offsets of records fetched before an assignment changed are
    not committed.
    """

    def _client_configs(
        self, bootstrap_servers: str, config: dict[str, Any], producer_config: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        taken = sorted(set(config) & set(OWN_PROPERTIES))
        if taken:
            raise InvalidArgument(
                f"{self.entry}: config may not set {taken}: the consumer sets them (the group "
                "is group_id=..., offsets are committed only after the database commit)"
            )
        consumer = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "error_cb": self._on_error,
            **config,
        }
        producer = {
            "bootstrap.servers": bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            **producer_config,
        }
        return consumer, producer

    def _client_state(self) -> None:
        self._stop = threading.Event()
        self.consumer: KafkaConsumer | None = None
        self.producer: Producer | None = None
        #: Offsets a rebalance refused, committed at the partitions' revocation.
        self._uncommitted: dict[Position, int] = {}

    def check(self) -> None:
        """The start-up check :meth:`run` makes first; returns None or raises.

        :raises ConfigurationError: see :func:`sa_inbox.readiness.check_ready`.
        """
        self.readiness.check()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the poll in hand (from any thread)."""
        self._stop.set()

    def _stopping(self) -> bool:
        extra = self._extra_stop
        return self._stop.is_set() or (extra is not None and extra.is_set())

    def run(self, stop: Any = None) -> None:
        """:meth:`check` (waiting out a database that cannot be reached), join the group,
        then poll and settle until :meth:`stop` is called or ``stop`` (a
        :class:`threading.Event`) is set; then the member leaves the group.

        :raises InvalidArgument: for a ``config`` or ``producer_config`` property that
            librdkafka refuses, before any SQL.
        :raises ConfigurationError: from :meth:`check`; from a poll, nothing of it
            committed.
        :raises MissingKeyHeader: see ``options.max_keyless``.
        """
        self._extra_stop = stop
        self.producer, self.consumer = self._clients()
        try:
            starting = OutageGate(
                self.consumer_name, hooks=self.inbox.hooks, sleep=self._sleep_unless_stopped
            )
            if not self.readiness.start(starting):
                return
            runner = PollRunner(
                session_factory=self.session_factory,
                inbox=self.inbox,
                consumer_name=self.consumer_name,
                handler=self.handler,
                max_deliveries=self.max_deliveries,
                attempts=self.attempts,
                offsets=self.offsets,
                dead_letter=self._publish_dead_letter,
                gate=OutageGate(
                    self.consumer_name, hooks=self.inbox.hooks, sleep=self._sleep_unless_stopped
                ),
                probe=probe_sessions(self.session_factory),
                sleep=time.sleep,
            )
            self.consumer.subscribe(
                list(self.topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            while not self._stopping():
                self._poll_once(runner)
        finally:
            self.consumer.close()
            self.producer.flush(10)
            self.consumer = self.producer = None

    def _clients(self) -> tuple[Producer, KafkaConsumer]:
        """The dead letters' producer and the group's consumer, made (not yet connected)
        before any SQL.

        :raises InvalidArgument: for a property librdkafka refuses (its ``_INVALID_ARG``:
            librdkafka's CONFIGURATION.md lists the properties).
        """
        made: list[str] = []
        try:
            producer = Producer(self.producer_config)
            made.append("producer_config")
            return producer, KafkaConsumer(self.config)
        except KafkaException as exc:
            name = "config" if made else "producer_config"
            raise InvalidArgument(f"{self.entry}: {name}: {exc.args[0].str()}") from exc

    def _poll_once(self, runner: PollRunner) -> None:
        assert self.consumer is not None
        messages = self.consumer.consume(self.max_records, self.poll_timeout)
        epoch = self.assignment.epoch
        records: list[Record] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    logger.warning("consumer %s: %s", self.consumer_name, error)
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            records.append(
                make_record(
                    topic,
                    partition,
                    offset,
                    message.value(),
                    message.key(),
                    message.headers(),
                    key_header=self.key_header,
                )
            )
        if records:
            self.reconnects.connected()
        records, floors = self.admit(records)
        for (topic, partition), offset in floors.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))
        try:
            settled = self.settle(records, runner)
        except DatabaseUnavailable:
            if self._stopping():
                return  # abandoned: nothing of the poll committed
            raise
        self._commit(settled, epoch)

    def _commit(self, settled: Settled, epoch: int) -> None:
        assert self.consumer is not None
        offsets = self.assignment.committable(epoch, settled.commit)
        for (topic, partition), offset in settled.seek.items():
            if (topic, partition) in offsets:
                self.consumer.seek(TopicPartition(topic, partition, offset))
        if not offsets:
            return
        try:
            self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
            for position in offsets:  # superseded: never committed back over these
                self._uncommitted.pop(position, None)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
            if code not in _REBALANCED and code not in _UNREACHABLE:
                raise
            self._uncommitted.update(offsets)  # tried again when the partitions are revoked
            logger.warning(
                "consumer %s: offsets not committed (%s); the records come again to their "
                "partitions' owners, as duplicates",
                self.consumer_name,
                exc,
                extra={"action": "commit_failed"},
            )

    def _publish_dead_letter(self, record: Record, reason: DeadLetterReason, detail: str) -> None:
        """Produce the dead letter and wait for its delivery report.

        :raises KafkaException: if it was not delivered (the record is then not settled).
        """
        assert self.producer is not None
        report: list[KafkaError | None] = []
        self.producer.produce(
            self.dead_letter_topic_of(record),
            value=record.value,
            key=record.key,
            headers=dead_letter_headers(record, reason, detail),
            on_delivery=lambda error, _message: report.append(error),
        )
        self.producer.flush(30)
        if not report or report[0] is not None:
            raise KafkaException(report[0] if report else KafkaError(KafkaError._MSG_TIMED_OUT))

    # -- librdkafka's callbacks (inside consume(), on this thread) -----------------------

    def _on_assign(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        positions = [(p.topic, p.partition) for p in partitions]
        self.reconnects.connected()
        if self.offsets is None or not positions:
            self.assigned(positions)
            return
        try:
            with self.session_factory() as session:
                stored = self.stored_offsets(session, positions)
        except Exception as exc:  # the group's committed offsets, behind the database's
            self.offsets_unread(exc)
            self.assigned(positions)
            return
        self.assigned(positions, stored)  # their floors: nothing below them is settled
        for p in partitions:
            if (p.topic, p.partition) in stored:
                p.offset = stored[(p.topic, p.partition)]
        consumer.assign(partitions)

    def _on_revoke(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        """Before the partitions go: the offsets a rebalance in progress refused are
        committed now (still this member's; Kafka's "commit in onPartitionsRevoked"), then
        the partitions are forgotten."""
        positions = {(p.topic, p.partition) for p in partitions}
        pending = {p: o for p, o in self._uncommitted.items() if p in positions}
        if pending and self.assignment.owned >= set(pending):
            try:
                consumer.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in pending.items()],
                    asynchronous=False,
                )
            except KafkaException as exc:
                logger.info(
                    "consumer %s: offsets not committed at revocation: %s", self.consumer_name, exc
                )
        self._uncommitted.clear()
        self.revoked(positions)

    def _on_lost(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        """Partitions lost (the member was dropped): nothing may be committed for them."""
        self._uncommitted.clear()
        self.revoked((p.topic, p.partition) for p in partitions)

    def _on_error(self, error: KafkaError) -> None:
        if error.code() in _UNREACHABLE:
            self.reconnects.failed(KafkaException(error))

    def _sleep_unless_stopped(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self._stopping() and (left := deadline - time.monotonic()) > 0:
            self._stop.wait(min(left, 0.25))
        return self._stopping()
