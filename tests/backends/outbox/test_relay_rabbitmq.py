"""The outbox relay to the live RabbitMQ, on each database: each committed row is published
once with its message_id and confirmed, failures back off and go dead at the limit without
blocking the rest, per-destination order holds past a failure, dispatched rows are purged,
and a relay SIGKILLed between the confirm and the mark republishes a row that the consuming
sa-inbox drops."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pika.exceptions
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import Backoff
from sa_inbox.brokers import Delivery, DeliveryOptions, Disposition, Settlement
from sa_inbox.brokers.rabbitmq import (
    Consumer,
    Publisher,
    dead_letter_queue_name,
    declare_queue,
)
from sa_inbox.outbox import OutboxMessage, OutboxRelay, purge_dispatched
from tests.backends.brokers.test_rabbitmq import amqp_url, channel, dead_letters, eventually, ready
from tests.support.outbox_app import OutboxApp

__all__ = ["amqp_url", "channel"]  # fixtures

pytestmark = pytest.mark.backend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
CHILD = "tests.backends.outbox.service_child"
FAST: dict[str, Any] = {"poll_interval": 0.05, "backoff": Backoff(base=0.05, maximum=0.2)}


@pytest.fixture
def oapp(engine: sa.Engine) -> Iterator[OutboxApp]:
    app = OutboxApp(engine)
    app.reset()
    yield app
    app.drop()


@pytest.fixture
def queues(channel: Any) -> Iterator[list[str]]:
    """Three fresh quorum queues (with dead-letter queues); deleted after."""
    names = [f"sa-inbox-outbox-{uuid.uuid4().hex[:12]}" for _ in range(3)]
    for name in names:
        declare_queue(channel, name)
    yield names
    for name in names:
        channel.queue_delete(name)
        channel.queue_delete(dead_letter_queue_name(name))


def take(channel: Any, queue: str) -> list[tuple[str, dict[str, Any], bytes]]:
    """Get and ack everything in ``queue``: (message_id, headers, body) in queue order; the
    broker's own ``x-`` headers (``x-delivery-count``) left out."""
    out = []
    while True:
        method, properties, body = channel.basic_get(queue)
        if method is None:
            return out
        headers = {k: v for k, v in (properties.headers or {}).items() if not k.startswith("x-")}
        out.append((properties.message_id, headers, body))
        channel.basic_ack(method.delivery_tag)


def record(app: OutboxApp, *messages: tuple[str, bytes], commit: bool = True) -> list[str]:
    ids: list[str] = []
    with app.Session() as session, session.begin():
        for destination, payload in messages:
            ids.append(app.outbox.publish(session, destination, payload, headers={"k": "v"}))
        if not commit:
            session.rollback()
    return ids if commit else []


def test_each_committed_row_is_published_once_with_its_message_id_and_marked(
    oapp: OutboxApp, channel: Any, queues: list[str], amqp_url: str
) -> None:
    q = queues[0]
    ids = record(oapp, *[(q, f"{n}.00".encode()) for n in range(5)])
    record(oapp, (q, b"rolled back"), commit=False)
    publisher = Publisher(amqp_url)
    try:
        total = OutboxRelay(oapp.engine, oapp.outbox, publisher, **FAST).run(until_empty=True)
    finally:
        publisher.close()
    assert (total.claimed, total.dispatched, total.retried, total.dead) == (5, 5, 0, 0)
    got = take(channel, q)
    assert [m for m, _, _ in got] == ids  # the outbox ids, in id order, each once
    assert [b for _, _, b in got] == [f"{n}.00".encode() for n in range(5)]
    assert [h for _, h, _ in got] == [{"k": "v"}] * 5
    rows = oapp.outbox_rows()
    assert {(r["status"], r["attempts"], r["claimed_by"]) for r in rows} == {
        ("dispatched", 1, None)
    }
    assert all(r["dispatched_at"] >= r["created_at"] for r in rows)


def test_a_failing_destination_backs_off_then_goes_dead_without_blocking_the_rest(
    oapp: OutboxApp, channel: Any, queues: list[str], amqp_url: str
) -> None:
    missing = f"sa-inbox-outbox-missing-{uuid.uuid4().hex[:8]}"
    record(oapp, (missing, b"nowhere"), (queues[0], b"ok"))
    publisher = Publisher(amqp_url)
    try:
        relay = OutboxRelay(oapp.engine, oapp.outbox, publisher, max_attempts=3, **FAST)
        first = relay.run_once()
        assert (first.dispatched, first.retried) == (1, 1)
        (waiting,) = oapp.outbox_rows("pending")
        assert waiting["available_at"] > waiting["created_at"]  # the back-off
        assert "UnroutableError" in waiting["last_error"]
        total = relay.run(until_empty=True)
    finally:
        publisher.close()
    assert (total.retried, total.dead) == (1, 1)
    (dead,) = oapp.outbox_rows("dead")
    assert (dead["destination"], dead["attempts"]) == (missing, 3)
    assert [b for _, _, b in take(channel, queues[0])] == [b"ok"]


class FailFirst:
    """The real publisher, except that the first publish of ``message_id`` is refused as
    the broker refuses a message (a ``basic.nack``: pika's ``NackError``), which counts an
    attempt (a connection error would not: the broker was unreachable)."""

    def __init__(self, publisher: Publisher, message_id: str) -> None:
        self.publisher, self.message_id, self.failed = publisher, message_id, False

    def publish(self, message: OutboxMessage) -> None:
        if message.message_id == self.message_id and not self.failed:
            self.failed = True
            raise pika.exceptions.NackError([])
        self.publisher.publish(message)

    def close(self) -> None:
        self.publisher.close()


@pytest.mark.parametrize("ordered", [True, False])
def test_per_destination_order_holds_past_a_failure_only_when_asked(
    oapp: OutboxApp, channel: Any, queues: list[str], amqp_url: str, ordered: bool
) -> None:
    q, other = queues[0], queues[1]
    ids = record(oapp, (q, b"1"), (q, b"2"), (other, b"x"), (q, b"3"))
    publisher = FailFirst(Publisher(amqp_url), ids[0])
    try:
        relay = OutboxRelay(oapp.engine, oapp.outbox, publisher, ordered=ordered, **FAST)
        relay.run(until_empty=True)
    finally:
        publisher.close()
    bodies = [b for _, _, b in take(channel, q)]
    assert bodies == ([b"1", b"2", b"3"] if ordered else [b"2", b"3", b"1"])
    assert [b for _, _, b in take(channel, other)] == [b"x"]  # never waited for q
    assert {r["status"] for r in oapp.outbox_rows()} == {"dispatched"}


def test_dispatched_rows_are_purged_and_the_others_kept(
    oapp: OutboxApp, queues: list[str], amqp_url: str
) -> None:
    record(oapp, (queues[0], b"a"), (queues[0], b"b"))
    publisher = Publisher(amqp_url)
    try:
        OutboxRelay(oapp.engine, oapp.outbox, publisher, **FAST).run(until_empty=True)
    finally:
        publisher.close()
    record(oapp, (queues[0], b"pending"))
    week = datetime.timedelta(days=7)
    assert purge_dispatched(oapp.engine, oapp.outbox, older_than=week) == 0
    assert purge_dispatched(oapp.engine, oapp.outbox, older_than=datetime.timedelta(0)) == 2
    assert [r["status"] for r in oapp.outbox_rows()] == ["pending"]


def child(role: str, amqp_url: str, oapp: OutboxApp, queue: str, out: str = "") -> list[str]:
    url = oapp.engine.url.render_as_string(hide_password=False)
    process = subprocess.run(
        [sys.executable, "-m", CHILD, role, amqp_url, url, queue, out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert process.returncode == -signal.SIGKILL, process.stderr
    return process.stdout.split("\n")[:-1]


def test_a_relay_killed_between_confirm_and_mark_republishes_and_the_inbox_drops_the_copy(
    oapp: OutboxApp, channel: Any, queues: list[str], amqp_url: str
) -> None:
    q = queues[0]
    ids = record(oapp, (q, b"10.00"), (q, b"5.00"))
    assert child("relay-crash-before-mark", amqp_url, oapp, q) == ["PUBLISHED 2"]
    assert ready(channel, q) == 2, "confirmed by RabbitMQ before the kill"
    assert {r["status"] for r in oapp.outbox_rows()} == {"processing"}
    publisher = Publisher(amqp_url)
    try:  # a new relay takes the abandoned rows after the visibility timeout: published again
        relay = OutboxRelay(oapp.engine, oapp.outbox, publisher, visibility_timeout=0.5, **FAST)
        total = relay.run(until_empty=True)
    finally:
        publisher.close()
    assert total.dispatched == 2 and ready(channel, q) == 4
    rows = oapp.outbox_rows()
    assert [(r["status"], r["attempts"]) for r in rows] == [("dispatched", 2)] * 2

    settled: list[Settlement] = []

    def handler(session: Session, delivery: Delivery) -> None:
        oapp.apply_payment(session, delivery.message_id or "", 2, Decimal(delivery.body.decode()))

    consumer = Consumer(
        amqp_url,
        q,
        session_factory=oapp.Session,
        inbox=oapp.inbox,
        consumer_name="service-b",
        handler=handler,
        options=DeliveryOptions(on_settled=settled.append),
    )
    thread = threading.Thread(target=consumer.run)
    thread.start()
    try:
        eventually(lambda: len(settled) == 4)
    finally:
        consumer.stop()
        thread.join(10)
    outcomes = sorted((s.delivery.message_id or "", s.disposition.value) for s in settled)
    assert outcomes == sorted(
        [(i, Disposition.PROCESSED.value) for i in ids]
        + [(i, Disposition.DUPLICATE.value) for i in ids]
    )
    assert oapp.balance(2) == Decimal("15.00") and oapp.ledger_rows() == 2
    assert ready(channel, q) == 0 and dead_letters(channel, q) == []


def test_the_publisher_reconnects_after_its_connection_is_closed(
    channel: Any, queues: list[str], amqp_url: str
) -> None:
    publisher = Publisher(amqp_url)
    message = OutboxMessage(1, "m-1", queues[0], b"a")
    try:
        publisher.publish(message)
        publisher._connection.close()  # as a broker restart would
        publisher.publish(message)  # a new connection
    finally:
        publisher.close()
    assert [m for m, _, _ in take(channel, queues[0])] == ["m-1", "m-1"]


def test_concurrent_relays_publish_each_row_once(
    oapp: OutboxApp, channel: Any, queues: list[str], amqp_url: str
) -> None:
    """Four relays (threads, one connection and one publisher each) claim with SKIP LOCKED:
    no row is published twice, none is left (SQLite: one writer at a time, same result)."""
    rows = 120
    ids = record(oapp, *[(queues[0], str(n).encode()) for n in range(rows)])
    totals: list[int] = []

    def relay() -> None:
        publisher = Publisher(amqp_url)
        try:
            total = OutboxRelay(oapp.engine, oapp.outbox, publisher, batch_size=7, **FAST).run(
                until_empty=True
            )
            totals.append(total.dispatched)
        finally:
            publisher.close()

    threads = [threading.Thread(target=relay) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(totals) == rows and len(totals) == 4
    got = [m for m, _, _ in take(channel, queues[0])]
    assert sorted(got) == sorted(ids) and len(set(got)) == rows
    assert {(r["status"], r["attempts"]) for r in oapp.outbox_rows()} == {("dispatched", 1)}


def test_the_async_relay_pipelines_confirms_with_aio_pika(
    oapp: OutboxApp, channel: Any, queues: list[str], amqp_url: str
) -> None:
    """AsyncPublisher.publish_many: a batch sent, then every confirm awaited; a returned
    (unroutable) message fails alone; the queue keeps the outbox order."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from sa_inbox.asyncio import AsyncOutboxRelay
    from sa_inbox.brokers.rabbitmq import AsyncPublisher

    missing = f"sa-inbox-outbox-missing-{uuid.uuid4().hex[:8]}"
    ids = record(oapp, *[(queues[0], str(n).encode()) for n in range(30)], (missing, b"x"))
    drivers = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}
    drivers["mysql"] = "mysql+aiomysql"
    url = oapp.engine.url.set(drivername=drivers[oapp.engine.dialect.name])

    async def run() -> Any:
        engine = create_async_engine(url)
        publisher = AsyncPublisher(amqp_url)
        try:
            relay = AsyncOutboxRelay(
                engine, oapp.outbox, publisher, max_attempts=1, batch_size=50, **FAST
            )
            return await relay.run(until_empty=True)
        finally:
            await publisher.close()
            await engine.dispose()

    total = asyncio.run(run())
    assert (total.dispatched, total.dead) == (30, 1)
    assert [m for m, _, _ in take(channel, queues[0])] == ids[:30]
    (dead,) = oapp.outbox_rows("dead")
    assert dead["message_id"] == ids[30] and "NO_ROUTE" in dead["last_error"]
