"""The chaos run's Kafka driver, on :class:`~sa_inbox.brokers.kafka.Consumer` (``kafka://``
URLs: ``kafka://host:port``).

The run's queue ``name`` becomes a topic of :data:`PARTITIONS` partitions and its
dead-letter topic ``<name>.dead`` (the adapter's default), consumed by the group
``<name>-group`` that every consumer process joins. A SIGKILLed consumer's partitions go
to the others once the group coordinator gives up on it (its session timeout,
:data:`SESSION_TIMEOUT_MS`), and they fetch from the last committed offsets: whatever the
killed one committed to the database but not to the group comes again, as duplicates.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..._optional import optional_dependencies
from ...claim import Inbox
from . import ChaosDriver, Consumption

with optional_dependencies(__name__, "kafka", "confluent_kafka"):
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    from ...brokers.kafka import (
        DEAD_LETTER_MESSAGE_ID,
        DEFAULT_KEY_HEADER,
        Consumer,
        kafka_tables,
    )

__all__ = ["PARTITIONS", "SESSION_TIMEOUT_MS", "Driver", "bootstrap_servers", "ensure_tables"]

#: Partitions of the run's topic (so that several consumers share it).
PARTITIONS = 4
#: The consumers' session timeout: a killed consumer's partitions move this soon (Tansu
#: also holds each JoinGroup for half of it while the group forms).
SESSION_TIMEOUT_MS = 6000
#: Records per poll of the run's consumers: each poll is one transaction holding its rows'
#: locks (the payments' accounts) until it commits; small polls keep the consumers' lock
#: waits and deadlocks short.
MAX_RECORDS = 50
#: Seconds without a settlement after which the run looks at what is left (the chaos run's
#: ``quiet_seconds``): a killed member's partitions move after its session timeout and a
#: rebalance, which Tansu holds for half the session timeout per JoinGroup.
QUIET_SECONDS = 3 * SESSION_TIMEOUT_MS / 1000
#: Seconds without a record after which a read of a topic is taken as complete.
QUIET_READ_S = 2.0
#: Records per producer flush when publishing.
PUBLISH_CHUNK = 5000


def bootstrap_servers(url: str) -> str:
    """``host:port`` of a ``kafka://host:port`` URL."""
    return url.split("://", 1)[1].rstrip("/")


class Driver(ChaosDriver):
    """The :class:`~sa_inbox.chaos.drivers.ChaosDriver` for ``kafka://`` URLs.

    :param url: ``kafka://host:port`` (one bootstrap server).
    """

    #: See :data:`QUIET_SECONDS`.
    quiet_seconds = QUIET_SECONDS

    def __init__(self, url: str) -> None:
        self.url = url
        self.servers = bootstrap_servers(url)

    def prepare(self, name: str, *, max_deliveries: int) -> None:
        """Create the topic (:data:`PARTITIONS` partitions) and ``<name>.dead``; the names
        are the run's own (a fresh name per run), so nothing is deleted."""
        admin = AdminClient({"bootstrap.servers": self.servers})
        topics = [NewTopic(name, PARTITIONS, 1), NewTopic(_dead(name), 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result(30)

    def publish(self, name: str, messages: Iterable[tuple[str, bytes]]) -> None:
        """Produce each message with its id in the ``message_id`` header (``acks=all``,
        idempotent), waiting for every delivery report."""
        producer = Producer(
            {"bootstrap.servers": self.servers, "acks": "all", "enable.idempotence": True}
        )
        failed: list[Any] = []

        def report(error: Any, _message: Any) -> None:
            if error is not None:
                failed.append(error)

        pending = iter(messages)
        while chunk := list(islice(pending, PUBLISH_CHUNK)):
            for message_id, body in chunk:
                producer.produce(
                    name,
                    value=body,
                    headers=[(DEFAULT_KEY_HEADER, message_id.encode())],
                    on_delivery=report,
                )
                producer.poll(0)
            producer.flush(60)
        if failed:
            raise KafkaException(failed[0])

    def run_consumer(self, name: str, consumption: Consumption, stop: threading.Event) -> None:
        """Run a :class:`~sa_inbox.brokers.kafka.Consumer` of ``<name>-group`` until
        ``stop`` is set, the adapter's tables created first if missing
        (:func:`ensure_tables`)."""
        ensure_tables(consumption.session_factory, consumption.inbox)
        Consumer(
            name,
            bootstrap_servers=self.servers,
            group_id=_group(name),
            **consumption.adapter_options(),
            poll_timeout=0.5,
            max_records=MAX_RECORDS,
            config={
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 500,
            },
        ).run(stop)

    def unsettled(self, name: str) -> int:
        """Records after the group's committed offset, over every partition (from the
        partition's start where none is committed), counted by reading them: Tansu 0.6.0
        answers ``ListOffsets`` for the latest offset with a wrong one (1 on a partition
        of hundreds of records), so the high watermarks cannot tell."""
        partitions = [TopicPartition(name, p) for p in range(PARTITIONS)]
        group = KafkaConsumer({"bootstrap.servers": self.servers, "group.id": _group(name)})
        try:
            done = {tp.partition: tp.offset for tp in group.committed(partitions, 30)}
        finally:
            group.close()
        starts = [TopicPartition(name, p, max(done.get(p, 0), 0)) for p in range(PARTITIONS)]
        return len(self._read(starts))

    def dead_letters(self, name: str) -> list[str]:
        """The distinct ``sa-inbox-message-id`` headers of the records of ``<name>.dead``
        (``""`` for a record that had no key). A consumer killed after a dead letter's
        publish and before its offset commit publishes it again when the record comes
        back (Kafka drops no duplicate publish across producers): the dead-letter topic
        holds it twice, with the same header, and its reader deduplicates on it."""
        ids = [
            (dict(headers).get(DEAD_LETTER_MESSAGE_ID) or b"").decode()
            for headers in self._read([TopicPartition(_dead(name), 0, 0)])
        ]
        return list(dict.fromkeys(ids))

    def _read(self, starts: list[TopicPartition]) -> list[list[tuple[str, Any]]]:
        """The headers of every record from ``starts`` on, read until nothing more came for
        :data:`QUIET_READ_S`."""
        consumer = KafkaConsumer(
            {
                "bootstrap.servers": self.servers,
                "group.id": f"sa-inbox-chaos-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        found: list[list[tuple[str, Any]]] = []
        try:
            consumer.assign(starts)
            while True:
                messages = consumer.consume(1000, QUIET_READ_S)
                if not messages:
                    return found
                found += [_pairs(m.headers()) for m in messages if not m.error()]
        finally:
            consumer.close()

    def close(self) -> None:
        """Nothing to close: each call opens and closes its own clients."""


def ensure_tables(session_factory: Callable[[], Session], inbox: Inbox) -> None:
    """Create the adapter's tables (:func:`~sa_inbox.brokers.kafka.kafka_tables`) on the
    inbox's database if missing: the chaos run makes the demo's tables only. Consumer
    processes start together: a table another one created meanwhile is fine."""
    tables = kafka_tables(inbox)
    with session_factory() as session:
        engine = session.get_bind().engine
    for table in (tables.attempts, tables.offsets):
        try:
            table.create(engine, checkfirst=True)
        except sa.exc.DBAPIError:
            if not sa.inspect(engine).has_table(table.name, schema=table.schema):
                raise


def _pairs(headers: Any) -> list[tuple[str, Any]]:
    return list(headers.items() if isinstance(headers, dict) else headers or [])


def _dead(name: str) -> str:
    return f"{name}.dead"


def _group(name: str) -> str:
    return f"{name}-group"
