"""Helpers of the Kafka tests, shared by the test process and its consumer children: the
broker's address, topics, publishes, the group's committed offsets, the dead letters, and
the app with the adapter's tables."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from decimal import Decimal

import sqlalchemy as sa
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sa_inbox.brokers.kafka import DEAD_LETTER_MESSAGE_ID, DEAD_LETTER_REASON
from sa_inbox.brokers.kafka import kafka_tables as kafka_tables
from tests.support.app import App

__all__ = [
    "FAST_ASYNC",
    "FAST_SYNC",
    "bootstrap",
    "committed",
    "create_topic",
    "dead_letters",
    "kafka_app",
    "ledger",
    "publish",
]

#: aiokafka options that keep rebalances short on Tansu (it holds a JoinGroup for half the
#: session timeout while the group forms).
FAST_ASYNC = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 300}
#: The same for librdkafka.
FAST_SYNC = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300}


def bootstrap(url: str) -> str:
    """``host:port`` of a ``kafka://host:port`` URL."""
    return url.removeprefix("kafka://").rstrip("/")


def create_topic(servers: str, partitions: int = 1, name: str | None = None) -> str:
    """Create a fresh topic (a uuid in its name) and its dead-letter topic; its name."""
    name = name or f"sa-inbox-test-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": servers})
    topics = [NewTopic(name, partitions, 1), NewTopic(f"{name}.dead", 1, 1)]
    for future in admin.create_topics(topics).values():
        future.result(30)
    return name


def publish(
    servers: str,
    topic: str,
    payments: Iterable[tuple[str | None, str]],
    *,
    partition: int | None = None,
    header: str = "message_id",
) -> None:
    """Produce each ``(message_id, amount)`` (a None id: no key header), acks=all, waiting
    for every delivery report."""
    producer = Producer({"bootstrap.servers": servers, "acks": "all"})
    failed: list[object] = []
    for message_id, amount in payments:
        headers = [] if message_id is None else [(header, message_id.encode())]
        extra = {} if partition is None else {"partition": partition}
        producer.produce(
            topic,
            value=amount.encode(),
            headers=headers,
            on_delivery=lambda error, _m: error is not None and failed.append(error),
            **extra,
        )
    producer.flush(30)
    assert not failed, failed


def committed(servers: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (absent: none committed)."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        found = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=30
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def dead_letters(servers: str, topic: str, count: int, seconds: float = 30) -> list[dict[str, str]]:
    """The first ``count`` records of ``topic``'s dead-letter topic, their headers decoded
    (plus ``"value"``), read by a consumer of no group."""
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": f"reader-{uuid.uuid4().hex}",
         "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    consumer.assign([TopicPartition(f"{topic}.dead", 0, 0)])
    found: list[dict[str, str]] = []
    deadline = time.monotonic() + seconds
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            headers = {k: (v or b"").decode() for k, v in message.headers() or []}
            found.append({**headers, "value": (message.value() or b"").decode()})
    finally:
        consumer.close()
    return found


def kafka_app(engine: sa.Engine) -> App:
    """The payments app with the adapter's tables on its MetaData, created fresh."""
    app = App(engine)
    kafka_tables(app.inbox)
    app.reset()
    return app


def ledger(app: App) -> list[str]:
    """The ledger's message ids, sorted."""
    with app.engine.connect() as conn:
        return sorted(conn.execute(sa.select(app.ledger.c.message_id)).scalars())


def attempts(app: App) -> dict[str, int]:
    """The attempts table's rows: message_id -> attempts."""
    table = kafka_tables(app.inbox).attempts
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(table.c.message_id, table.c.attempts)).all())


def stored_offsets(app: App) -> dict[tuple[str, int], int]:
    """The offsets table's rows."""
    table = kafka_tables(app.inbox).offsets
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(table.c.topic, table.c.partition, table.c.next_offset))
        return {(t, p): o for t, p, o in rows}


def amounts(ids: Sequence[str]) -> list[tuple[str, str]]:
    """``(id, "1.00")`` for each id."""
    return [(i, "1.00") for i in ids]


_ = (Decimal, DEAD_LETTER_MESSAGE_ID, DEAD_LETTER_REASON)
