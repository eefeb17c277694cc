"""The FastStream middleware on FastStream's ``KafkaBroker`` (``InboxMiddleware(...,
kafka=True)``) against the live Kafka broker (Tansu), on every async driver chosen
(aiosqlite, asyncpg, ...): a FastStream broker in the test process, a subscriber with a
group and ``AckPolicy.MANUAL``, records published by confluent-kafka as a producer would
(:mod:`tests.backends.brokers.kafka_support`).

Asserted: the business state (ledger, balance, claims, the attempts table) and the
broker's (the group's committed offset, the dead-letter topic).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any

import pytest

from sa_inbox.brokers import Disposition, Settlement
from sa_inbox.exc import MissingKeyHeader, MissingTable
from tests.backends.brokers.kafka_support import (
    FAST_ASYNC,
    attempts,
    committed,
    create_topic,
    dead_letters,
    ledger,
    publish,
)
from tests.support.app import App
from tests.support.options import with_options

pytestmark = pytest.mark.backend

#: The header the middleware reads (its default, as on every broker).
KEY = "idempotency-key"
#: Seconds a test waits for its records to be settled (a group's first rebalance on Tansu
#: takes a few seconds).
SETTLE_S = 60.0
MAX_DELIVERIES = 3
MAX_KEYLESS = 3


def _middleware(aio_url: str, app: App, **options: Any) -> tuple[Any, Any]:
    """(the middleware, its engine)."""
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    from sa_inbox.brokers.faststream import InboxMiddleware

    engine = create_async_engine(aio_url)
    middleware = InboxMiddleware(
        session_factory=async_sessionmaker(engine),
        inbox=app.inbox,
        consumer_name="billing",
        kafka=True,
        **with_options(options),
    )
    return middleware, engine


async def _consume(
    servers: str,
    topic: str,
    group: str,
    middleware: Any,
    app: App,
    done: Callable[[], Any],
) -> None:
    """A KafkaBroker with ``middleware`` and one subscriber (``group``, manual acks) paying
    each record's amount to account 1, run until ``done()`` is true (at most SETTLE_S)."""
    from faststream import AckPolicy, Context
    from faststream.kafka import KafkaBroker
    from sqlalchemy.ext.asyncio import AsyncSession

    broker = KafkaBroker(servers, middlewares=[middleware], logger=None)

    @broker.subscriber(
        topic, group_id=group, ack_policy=AckPolicy.MANUAL, auto_offset_reset="earliest",
        **FAST_ASYNC,
    )  # fmt: skip
    async def pay(
        body: Any,
        session: Annotated[AsyncSession, Context("inbox_session")],
        message: Annotated[Any, Context("message")],
    ) -> None:
        amount = Decimal(message.body.decode())
        await app.apply_payment_async(session, message.headers[KEY], 1, amount)

    async with broker:
        await broker.start()
        await middleware.check()
        deadline = time.monotonic() + SETTLE_S
        while not await done():
            assert time.monotonic() < deadline, "not settled in time"
            await asyncio.sleep(0.1)


def _run(
    servers: str,
    topic: str,
    group: str,
    middleware: Any,
    engine: Any,
    app: App,
    done: Callable[[], Any],
) -> None:
    """:func:`_consume` in an event loop of its own, the middleware's engine disposed after."""

    async def run() -> None:
        try:
            await _consume(servers, topic, group, middleware, app, done)
        finally:
            await engine.dispose()

    asyncio.run(run())


def test_duplicates_once_poison_dead_lettered_keyless_dead_lettered(
    servers: str, aio_url: str, aio_app: App
) -> None:
    """One partition: a duplicate publish applied once, a poison record retried (each
    attempt counted in the attempts table) and dead-lettered at MAX_DELIVERIES while the
    records behind it are applied, a keyless record dead-lettered (a short run); every
    offset committed."""
    topic = create_topic(servers)
    group = f"g-{topic}"
    settled: list[Settlement] = []
    middleware, engine = _middleware(
        aio_url, aio_app, max_deliveries=MAX_DELIVERIES, on_settled=settled.append
    )
    records = [
        ("pay-1", "10.00"),
        ("pay-1", "10.00"),
        ("poison", "not-a-number"),
        ("pay-2", "2.00"),
        (None, "5.00"),
        ("pay-3", "3.00"),
    ]
    publish(servers, topic, records, header=KEY)

    async def done() -> bool:
        return sum(s.disposition is not Disposition.RETRY for s in settled) == len(records)

    _run(servers, topic, group, middleware, engine, aio_app, done)
    assert [(s.disposition.value, s.delivery.message_id) for s in settled] == [
        ("processed", "pay-1"),
        ("duplicate", "pay-1"),
        *[("retry", "poison")] * (MAX_DELIVERIES - 1),
        ("dead_lettered", "poison"),
        ("processed", "pay-2"),
        ("dead_lettered", None),
        ("processed", "pay-3"),
    ]
    assert [s.delivery.delivery_count for s in settled if s.delivery.message_id == "poison"] == [
        1, 2, 3
    ]  # fmt: skip
    assert ledger(aio_app) == ["pay-1", "pay-2", "pay-3"]
    assert aio_app.balance(1) == Decimal("15.00")
    assert aio_app.inbox_rows() == 3, "no claim for the dead letters"
    assert attempts(aio_app) == {}, "forgotten once dead-lettered, as the Kafka adapter does"
    assert committed(servers, group, topic, 1) == {0: len(records)}, "the partition went on"
    (poison, keyless) = dead_letters(servers, topic, 2)
    assert poison["value"] == "not-a-number"
    assert poison["sa-inbox-dead-letter-reason"] == "delivery_limit"
    assert poison["sa-inbox-message-id"] == poison[KEY] == "poison"
    assert (poison["sa-inbox-topic"], poison["sa-inbox-partition"]) == (topic, "0")
    assert poison["sa-inbox-offset"] == "2"
    assert "InvalidOperation" in poison["sa-inbox-dead-letter-detail"]
    assert keyless["value"] == "5.00"
    assert keyless["sa-inbox-dead-letter-reason"] == "missing_message_id"
    assert keyless["sa-inbox-offset"] == "4"
    assert "sa-inbox-message-id" not in keyless


def test_a_redelivered_committed_record_is_a_duplicate(
    servers: str, aio_url: str, aio_app: App
) -> None:
    """A second group of the same consumer name reads the topic again from its start (a
    replay, as after a lost offset commit): every record is acked as a duplicate, the
    handler never runs again."""
    topic = create_topic(servers)
    publish(servers, topic, [("pay-1", "1.00"), ("pay-2", "2.00")], header=KEY)
    for group in (f"g1-{topic}", f"g2-{topic}"):
        settled: list[Settlement] = []
        middleware, engine = _middleware(aio_url, aio_app, on_settled=settled.append)

        async def done(settled: list[Settlement] = settled) -> bool:
            return len(settled) == 2

        _run(servers, topic, group, middleware, engine, aio_app, done)
        expected = "processed" if group.startswith("g1") else "duplicate"
        assert [s.disposition.value for s in settled] == [expected] * 2
        assert committed(servers, group, topic, 1) == {0: 2}
    assert ledger(aio_app) == ["pay-1", "pay-2"]
    assert aio_app.balance(1) == Decimal("3.00")


def test_a_run_of_keyless_records_stops_the_subscriber(
    servers: str, aio_url: str, aio_app: App
) -> None:
    """A misspelled key header (the producer sets ``payment_id``): the rule of the other
    brokers. The first MAX_KEYLESS - 1 are dead-lettered and committed, the MAX_KEYLESS-th
    is given back (sought back, not committed) and the subscriber stops; ``check()``
    raises MissingKeyHeader."""
    topic = create_topic(servers)
    group = f"g-{topic}"
    settled: list[Settlement] = []
    middleware, engine = _middleware(
        aio_url, aio_app, max_keyless=MAX_KEYLESS, on_settled=settled.append
    )
    records = [(f"pay-{n}", "1.00") for n in range(MAX_KEYLESS + 1)]
    publish(servers, topic, records, header="payment_id")
    errors: list[BaseException] = []

    async def done() -> bool:
        try:
            await middleware.check()
        except MissingKeyHeader as exc:
            errors.append(exc)
            return True
        return False

    _run(servers, topic, group, middleware, engine, aio_app, done)
    (error,) = errors
    assert isinstance(error, MissingKeyHeader)
    assert (error.deliveries, error.dead_lettered) == (MAX_KEYLESS, MAX_KEYLESS - 1)
    assert [s.disposition for s in settled] == [Disposition.DEAD_LETTERED] * (MAX_KEYLESS - 1)
    assert (aio_app.ledger_rows(), aio_app.inbox_rows()) == (0, 0)
    assert committed(servers, group, topic, 1) == {0: MAX_KEYLESS - 1}, "the rest is left"
    found = dead_letters(servers, topic, MAX_KEYLESS, seconds=3)
    assert [d["sa-inbox-dead-letter-reason"] for d in found] == ["missing_message_id"] * (
        MAX_KEYLESS - 1
    )


def test_check_refuses_a_missing_attempts_table(aio_url: str, aio_app: App) -> None:
    """``kafka=True`` needs ``inbox_kafka_attempts`` (``kafka_tables(inbox)``, created with
    the inbox's table): ``check()`` raises MissingTable without it."""
    from sa_inbox.brokers.kafka import kafka_tables

    kafka_tables(aio_app.inbox).attempts.drop(aio_app.engine)
    middleware, engine = _middleware(aio_url, aio_app)

    async def run() -> None:
        try:
            with pytest.raises(MissingTable, match="inbox_kafka_attempts"):
                await middleware.check()
        finally:
            await engine.dispose()

    asyncio.run(run())
    kafka_tables(aio_app.inbox).attempts.create(aio_app.engine)  # for the fixture's drop
