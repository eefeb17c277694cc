"""The RabbitMQ adapter against the live broker (a quorum queue per test), on each database:
pika's :class:`Consumer` on the sync drivers, aio-pika's :class:`AsyncConsumer` on an
async driver per database. Business state (balances, ledger and claim rows) and broker state
(ready messages, the dead-letter queue's contents and headers) are read after each run."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from aio_pika.exceptions import DeliveryError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox.brokers import DeadLetterReason, Delivery, Disposition, Settlement
from sa_inbox.brokers.rabbitmq import (
    DETAIL_HEADER,
    QUEUE_HEADER,
    REASON_HEADER,
    AsyncConsumer,
    Consumer,
    dead_letter_queue_name,
    declare_queue,
    delivery_count,
)
from sa_inbox.chaos.drivers import driver_for
from sa_inbox.exc import InvalidArgument, MissingTable
from tests.backends.brokers.rabbitmq_child import AMOUNT
from tests.conftest import broker_url
from tests.support.app import CONSUMER, App
from tests.support.locks import assert_no_lock_held
from tests.support.options import with_options
from tests.support.pool import ONE_CONNECTION
from tests.support.waiting import eventually

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.backends.brokers.rabbitmq_child"
ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}
ASYNC_DRIVERS["mysql"] = "mysql+aiomysql"


@pytest.fixture
def amqp_url() -> str:
    return broker_url("rabbitmq")


@pytest.fixture
def channel(amqp_url: str) -> Iterator[Any]:
    """A pika channel (publisher confirms) to publish and to read the broker's state."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()
    yield channel
    connection.close()


@pytest.fixture
def queue(channel: Any) -> Iterator[str]:
    """A fresh quorum queue and its dead-letter queue, declared as the docs say; deleted after."""
    name = f"sa-inbox-test-{uuid.uuid4().hex[:12]}"
    assert declare_queue(channel, name) == dead_letter_queue_name(name)
    yield name
    channel.queue_delete(name)
    channel.queue_delete(dead_letter_queue_name(name))


def publish(channel: Any, queue: str, message_id: str | None, body: bytes, **props: Any) -> None:
    """Publish as a producer does: its key in the ``message_id`` property (None: no key)."""
    properties = pika.BasicProperties(message_id=message_id, delivery_mode=2, **props)
    channel.basic_publish("", queue, body, properties, mandatory=True)


def ready(channel: Any, queue: str) -> int:
    """Messages ready in ``queue`` (neither delivered nor in a consumer's hands)."""
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def dead_letters(channel: Any, queue: str) -> list[tuple[str | None, dict[str, Any], bytes]]:
    """Take everything in ``queue``'s dead-letter queue: (message_id, headers, body)."""
    out = []
    while True:
        method, properties, body = channel.basic_get(dead_letter_queue_name(queue))
        if method is None:
            return out
        out.append((properties.message_id, dict(properties.headers or {}), body))
        channel.basic_ack(method.delivery_tag)


def pay(app: App) -> Callable[[Session, Delivery], None]:
    def handler(session: Session, delivery: Delivery) -> None:
        if delivery.body == b"poison":
            raise RuntimeError("cannot parse the payment")
        app.apply_payment(session, delivery.message_id or "", 1, Decimal(delivery.body.decode()))

    return handler


def pay_async(app: App) -> Callable[[AsyncSession, Delivery], Any]:
    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        if delivery.body == b"poison":
            raise RuntimeError("cannot parse the payment")
        amount = Decimal(delivery.body.decode())
        await app.apply_payment_async(session, delivery.message_id or "", 1, amount)

    return handler


def async_url(app: App) -> str:
    url = app.engine.url
    url = url.set(drivername=ASYNC_DRIVERS[url.get_backend_name()])
    return url.render_as_string(hide_password=False)


def consume(
    amqp_url: str,
    app: App,
    queue: str,
    count: int,
    client: str = "pika",
    handler_async: Callable[[AsyncSession, Delivery], Any] | None = None,
    engine_kw: dict[str, Any] | None = None,
    **kw: Any,
) -> list[Settlement]:
    """Run a consumer (pika, or aio-pika on the database's async driver, with
    ``handler_async`` instead of :func:`pay_async` and ``engine_kw`` for its engine) in this
    process until it settled ``count`` deliveries (or 20 s passed), then stop it
    gracefully."""
    settlements: list[Settlement] = []
    if client == "pika":
        consumer: Consumer | None = None

        def settled(settlement: Settlement) -> None:
            settlements.append(settlement)
            if len(settlements) >= count and consumer is not None:
                consumer.stop()

        consumer = Consumer(
            amqp_url, queue, **with_options({**options(app, pay(app), settled), **kw})
        )
        timer = threading.Timer(20, consumer.stop)
        timer.start()
        try:
            consumer.run()
        finally:
            timer.cancel()
        return settlements

    async def main() -> None:
        engine = create_async_engine(async_url(app), **(engine_kw or {}))
        stop = asyncio.Event()

        def settled(settlement: Settlement) -> None:
            settlements.append(settlement)
            if len(settlements) >= count:
                stop.set()

        kw_async = options(app, handler_async or pay_async(app), settled) | {
            "session_factory": async_sessionmaker(engine)
        }
        consumer = AsyncConsumer(amqp_url, queue, **with_options({**kw_async, **kw}))
        try:
            await asyncio.wait_for(consumer.run(stop), 20)
        finally:
            await engine.dispose()

    asyncio.run(main())
    return settlements


def options(app: App, handler: Any, settled: Any) -> dict[str, Any]:
    return {
        "session_factory": app.Session,
        "inbox": app.inbox,
        "consumer_name": CONSUMER,
        "handler": handler,
        "max_deliveries": 3,
        "on_settled": settled,
    }


def dispositions(settlements: list[Settlement]) -> dict[str, list[str]]:
    """message_id → its deliveries' dispositions, in order."""
    out: dict[str, list[str]] = {}
    for settlement in settlements:
        key = settlement.delivery.message_id or "-"
        out.setdefault(key, []).append(settlement.disposition.value)
    return out


CLIENTS = ["pika", "aio-pika"]


# -- duplicates --------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_duplicate_publishes_change_the_data_once_per_message_id(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    for message_id, copies in [("pay-1", 3), ("pay-2", 2), ("pay-3", 1)]:
        for _ in range(copies):
            publish(channel, queue, message_id, b"10.00")  # the producer retried
    settlements = consume(amqp_url, app, queue, 6, client)
    assert dispositions(settlements) == {
        "pay-1": ["processed", "duplicate", "duplicate"],
        "pay-2": ["processed", "duplicate"],
        "pay-3": ["processed"],
    }
    assert app.balance(1) == Decimal("30.00")
    assert app.ledger_rows() == 3 and app.inbox_rows() == 3
    assert ready(channel, queue) == 0 and dead_letters(channel, queue) == []


def test_the_key_can_come_from_a_named_header(
    amqp_url: str, channel: Any, queue: str, app: App
) -> None:
    publish(channel, queue, "random-1", b"5.00", headers={"payment-id": "pay-9"})
    publish(channel, queue, "random-2", b"5.00", headers={"payment-id": "pay-9"})
    settlements = consume(amqp_url, app, queue, 2, key_source="payment-id")
    assert dispositions(settlements) == {"pay-9": ["processed", "duplicate"]}
    assert app.ledger_rows("pay-9") == 1 and app.balance(1) == Decimal("5.00")
    assert ready(channel, queue) == 0


# -- no key ----------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_a_message_without_message_id_is_dead_lettered_unprocessed(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    publish(channel, queue, None, b"10.00", correlation_id="order-7")  # pika sends no id
    publish(channel, queue, "pay-1", b"1.00")
    settlements = consume(amqp_url, app, queue, 2, client)
    assert [(s.disposition, s.reason) for s in settlements] == [
        (Disposition.DEAD_LETTERED, DeadLetterReason.MISSING_MESSAGE_ID),
        (Disposition.PROCESSED, None),
    ]
    assert app.ledger_rows() == 1 and app.balance(1) == Decimal("1.00")
    assert app.inbox_rows() == 1  # nothing was claimed for the keyless message
    ((_, headers, body),) = dead_letters(channel, queue)
    assert headers[REASON_HEADER] == "missing_message_id" and body == b"10.00"
    assert headers[QUEUE_HEADER] == queue
    assert ready(channel, queue) == 0


# -- poison ----------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_a_poison_message_is_dead_lettered_at_the_limit_without_blocking_the_rest(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    publish(channel, queue, "bad-1", b"poison")
    for n in range(1, 4):
        publish(channel, queue, f"pay-{n}", b"2.00")
    settlements = consume(amqp_url, app, queue, 6, client, prefetch=1)
    assert dispositions(settlements) == {
        "bad-1": ["retry", "retry", "dead_lettered"],
        "pay-1": ["processed"],
        "pay-2": ["processed"],
        "pay-3": ["processed"],
    }
    counts = [s.delivery.delivery_count for s in settlements if s.delivery.message_id == "bad-1"]
    assert counts == [1, 2, 3], "the quorum queue's x-delivery-count, plus one"
    assert app.balance(1) == Decimal("6.00") and app.ledger_rows("bad-1") == 0
    ((message_id, headers, body),) = dead_letters(channel, queue)
    assert (message_id, body, headers[REASON_HEADER]) == ("bad-1", b"poison", "delivery_limit")
    assert "RuntimeError: cannot parse the payment (delivery 3" in headers[DETAIL_HEADER]
    assert ready(channel, queue) == 0


def test_a_handler_leaving_a_gather_half_done_does_not_poison_the_pool(
    amqp_url: str, channel: Any, queue: str, app: App
) -> None:
    """``gather(session.execute(...), boom())`` in an aio-pika consumer on a pool of one
    connection. Before, on asyncpg the connection went back to the pool inside the failed
    transaction and every later message failed until dead-lettered ("cannot use
    Connection.transaction() in a manually started transaction")."""
    good = 100
    publish(channel, queue, "bad-1", b"gather")
    for n in range(good):
        publish(channel, queue, f"pay-{n}", b"1.00")
    paying = pay_async(app)

    async def boom() -> None:
        raise LookupError("the rate lookup failed")

    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        if delivery.body == b"gather":
            bad_row, _ = app.payment("bad-1", 1, Decimal(1))
            await asyncio.gather(session.execute(bad_row), boom())
        await paying(session, delivery)

    settlements = consume(
        amqp_url,
        app,
        queue,
        good + 3,
        "aio-pika",
        handler_async=handler,
        engine_kw=ONE_CONNECTION,
        prefetch=1,
    )
    outcomes = dispositions(settlements)
    assert outcomes.pop("bad-1") == ["retry", "retry", "dead_lettered"]
    assert outcomes == {f"pay-{n}": ["processed"] for n in range(good)}
    assert app.ledger_rows() == good and app.ledger_rows("bad-1") == 0
    assert app.inbox_rows() == good and app.balance(1) == Decimal(good)
    assert_no_lock_held(app.engine, app.ledger, app.inbox.table)
    ((message_id, headers, _),) = dead_letters(channel, queue)
    assert message_id == "bad-1" and "LookupError" in headers[DETAIL_HEADER]
    assert ready(channel, queue) == 0


# -- prefetch and stop -----------------------------------------------------------------


def test_prefetch_bounds_the_unacked_deliveries_and_stop_works_from_another_thread(
    amqp_url: str, channel: Any, queue: str, app: App
) -> None:
    for n in range(6):
        publish(channel, queue, f"pay-{n}", b"1.00")
    inside, release = threading.Event(), threading.Event()
    settlements: list[Settlement] = []

    def slow(session: Session, delivery: Delivery) -> None:
        inside.set()
        assert release.wait(10)
        pay(app)(session, delivery)

    consumer = Consumer(
        amqp_url, queue, **with_options({**options(app, slow, settlements.append), "prefetch": 2})
    )
    worker = threading.Thread(target=consumer.run)
    worker.start()
    try:
        assert inside.wait(10)
        eventually(lambda: ready(channel, queue) <= 4)
        time.sleep(0.3)
        assert ready(channel, queue) == 4, "the broker holds back all but prefetch=2"
    finally:
        release.set()
    eventually(lambda: len(settlements) == 6)
    consumer.stop()  # from this thread, while the consumer waits for messages
    worker.join(10)
    assert not worker.is_alive()
    assert app.ledger_rows() == 6 and ready(channel, queue) == 0


def test_prefetch_must_be_positive(amqp_url: str, app: App) -> None:
    with pytest.raises(InvalidArgument, match="prefetch"):
        Consumer(amqp_url, "q", **with_options({**options(app, pay(app), None), "prefetch": 0}))


# -- crashes ---------------------------------------------------------------------------


def child(client: str, amqp_url: str, db_url: str, queue: str, mode: str) -> list[str]:
    """Run the consumer process to its end (a SIGKILL in the crash modes); its lines."""
    process = subprocess.run(
        [sys.executable, "-m", CHILD, client, amqp_url, db_url, queue, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    expected = -signal.SIGKILL if mode.startswith("crash") else 0
    assert process.returncode == expected, process.stderr
    return process.stdout.split("\n")[:-1]


def db_url(app: App, client: str) -> str:
    if client == "aio-pika":
        return async_url(app)
    return app.engine.url.render_as_string(hide_password=False)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_consumer_killed_after_commit_before_ack_leaves_a_duplicate(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    publish(channel, queue, "pay-1", b"42.00")
    url = db_url(app, client)
    assert child(client, amqp_url, url, queue, "crash-after-commit") == ["COMMITTED"]
    assert app.ledger_rows("pay-1") == 1, "committed before the kill"
    eventually(lambda: ready(channel, queue) == 1)  # unacked: back when the connection died
    assert child(client, amqp_url, url, queue, "deliver") == ["duplicate 2"]
    assert app.ledger_rows("pay-1") == 1 and app.balance(1) == AMOUNT
    assert app.inbox_rows() == 1
    assert ready(channel, queue) == 0 and dead_letters(channel, queue) == []


@pytest.mark.parametrize("client", CLIENTS)
def test_a_consumer_killed_before_commit_leaves_a_redelivery_applied_once(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    publish(channel, queue, "pay-1", b"42.00")
    url = db_url(app, client)
    assert child(client, amqp_url, url, queue, "crash-before-commit") == ["APPLIED"]
    assert app.ledger_rows() == 0 and app.inbox_rows() == 0, "nothing survived the kill"
    eventually(lambda: ready(channel, queue) == 1)
    assert child(client, amqp_url, url, queue, "deliver") == ["processed 2"]
    assert app.ledger_rows("pay-1") == 1 and app.balance(1) == AMOUNT
    assert ready(channel, queue) == 0 and dead_letters(channel, queue) == []


# -- the chaos driver ------------------------------------------------------------------


def test_the_chaos_driver_survives_a_killed_consumer(amqp_url: str, app: App) -> None:
    driver = driver_for(amqp_url)
    name = f"sa-inbox-chaos-{uuid.uuid4().hex[:12]}"
    children: list[subprocess.Popen[str]] = []
    try:
        driver.prepare(name, max_deliveries=3)
        driver.prepare(name, max_deliveries=3)  # again: a fresh, empty queue
        messages = [(f"pay-{n}", b"1.00") for n in range(40)]
        driver.publish(name, [*messages, *messages[:10], ("bad-1", b"poison")])
        first = start_child("chaos", amqp_url, app, name)
        children.append(first)
        assert first.stdout is not None
        for _ in range(5):
            first.stdout.readline()
        first.send_signal(signal.SIGKILL)  # mid-stream, deliveries in its hands
        first.communicate(timeout=30)
        second = start_child("chaos", amqp_url, app, name)
        children.append(second)
        eventually(lambda: app.ledger_rows() == 40 and driver.dead_letters(name) == ["bad-1"])
        second.send_signal(signal.SIGTERM)  # the graceful stop
        out, err = second.communicate(timeout=30)
        assert second.returncode == 0 and out.endswith("STOPPED\n"), err
        assert driver.unsettled(name) == 0
        assert driver.dead_letters(name) == ["bad-1"]  # read twice: not taken
        assert app.balance(1) == Decimal("40.00") and app.inbox_rows() == 40
    finally:
        stop_children(children)
        driver.channel.queue_delete(name)
        driver.channel.queue_delete(dead_letter_queue_name(name))
        driver.close()


def stop_children(children: list[subprocess.Popen[str]]) -> None:
    """SIGKILL the children still running and reap them (their pipes closed)."""
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)


def start_child(client: str, amqp_url: str, app: App, queue: str) -> subprocess.Popen[str]:
    url = app.engine.url.render_as_string(hide_password=False)
    return subprocess.Popen(
        [sys.executable, "-m", CHILD, client, amqp_url, url, queue, "-"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


# -- what RabbitMQ and the clients do (the facts the adapter's docs rely on) ------------


def test_only_the_quorum_queue_counts_deliveries(amqp_url: str, channel: Any) -> None:
    """Quorum: x-delivery-count on each redelivery, after a nack and after a dropped
    connection alike. Classic: only the redelivered flag, so the count stops at 2."""
    seen: dict[str, list[int]] = {}
    for kind in ("quorum", "classic"):
        name = f"sa-inbox-test-{kind}-{uuid.uuid4().hex[:12]}"
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": kind})
        try:
            publish(channel, name, "pay-1", b"1")
            for attempt in range(4):
                connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
                consumer = connection.channel()
                method, properties, _ = get(consumer, name)
                seen.setdefault(kind, []).append(
                    delivery_count(properties.headers, method.redelivered)
                )
                if attempt % 2 == 0:
                    consumer.basic_nack(method.delivery_tag, requeue=True)
                connection.close()  # odd attempts: dropped with the delivery unacked
        finally:
            channel.queue_delete(name)
    assert seen == {"quorum": [1, 2, 3, 4], "classic": [1, 2, 2, 2]}


def get(channel: Any, queue: str) -> tuple[Any, Any, bytes]:
    deadline = time.monotonic() + 5
    while True:
        method, properties, body = channel.basic_get(queue)
        if method is not None:
            return method, properties, body
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_aio_pika_fills_in_a_random_message_id_that_dedups_no_producer_retry(
    amqp_url: str, channel: Any, queue: str, app: App
) -> None:
    async def produce() -> None:
        connection = await aio_pika.connect(amqp_url)
        async with connection:
            producer = await connection.channel()
            for _ in range(2):  # the producer retries a publish, setting no message_id
                await producer.default_exchange.publish(aio_pika.Message(b"3.00"), queue)

    asyncio.run(produce())
    settlements = consume(amqp_url, app, queue, 2, "aio-pika")
    ids = [s.delivery.message_id or "" for s in settlements]
    assert ids[0] != ids[1] and all(re.fullmatch("[0-9a-f]{32}", i) for i in ids), ids
    assert [s.disposition for s in settlements] == [Disposition.PROCESSED] * 2
    assert app.balance(1) == Decimal("6.00"), "applied twice: the key was not the producer's"


# -- the delivery limit when consumers die, errors left unsettled ----------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_a_message_whose_consumers_died_past_the_limit_is_dead_lettered_unrun(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    publish(channel, queue, "pay-1", b"1.00")
    for _ in range(3):  # three consumers die holding it (max_deliveries=3)
        connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        get(connection.channel(), queue)
        connection.close()
    ran: list[Delivery] = []

    def handler(session: Any, delivery: Delivery) -> None:
        ran.append(delivery)

    settlements = consume(amqp_url, app, queue, 1, client, handler=handler)
    [settlement] = settlements
    assert settlement.reason is DeadLetterReason.DELIVERY_LIMIT
    assert settlement.delivery.delivery_count == 4 and ran == []
    assert app.ledger_rows() == 0 and app.inbox_rows() == 0, "the claim was rolled back"
    ((message_id, headers, _),) = dead_letters(channel, queue)
    assert message_id == "pay-1" and headers[REASON_HEADER] == "delivery_limit"
    assert ready(channel, queue) == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_a_configuration_error_stops_the_consumer_with_the_delivery_unsettled(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    publish(channel, queue, "pay-1", b"1.00")
    app.drop()  # no inbox table: every message would fail
    try:
        with pytest.raises(MissingTable):
            consume(amqp_url, app, queue, 1, client)
    finally:
        app.reset()
    eventually(lambda: ready(channel, queue) == 1)  # back in the queue, not dead-lettered
    assert dead_letters(channel, queue) == []


@pytest.mark.parametrize("client", CLIENTS)
def test_a_dead_letter_that_cannot_be_routed_leaves_the_original_in_the_queue(
    amqp_url: str, channel: Any, queue: str, app: App, client: str
) -> None:
    publish(channel, queue, None, b"1.00")
    channel.queue_delete(dead_letter_queue_name(queue))
    unroutable = pika.exceptions.UnroutableError if client == "pika" else DeliveryError
    with pytest.raises(unroutable):
        consume(amqp_url, app, queue, 1, client)
    eventually(lambda: ready(channel, queue) == 1)  # never lost between publish and ack


def test_aio_pika_respects_prefetch_and_stops_on_request(
    amqp_url: str, channel: Any, queue: str, app: App
) -> None:
    for n in range(5):
        publish(channel, queue, f"pay-{n}", b"1.00")
    settled: list[Settlement] = []

    async def main() -> int:
        engine = create_async_engine(async_url(app))
        release = asyncio.Event()

        async def slow(session: AsyncSession, delivery: Delivery) -> None:
            await release.wait()
            await pay_async(app)(session, delivery)

        kw = options(app, slow, settled.append) | {"session_factory": async_sessionmaker(engine)}
        consumer = AsyncConsumer(amqp_url, queue, **with_options({**kw, "prefetch": 2}))
        task = asyncio.create_task(consumer.run())
        deadline = time.monotonic() + 10
        while ready(channel, queue) > 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        held_back = ready(channel, queue)
        release.set()
        while len(settled) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        consumer.stop()  # while it waits for the next message
        await asyncio.wait_for(task, 10)
        await engine.dispose()
        return held_back

    assert asyncio.run(main()) == 3, "the broker holds back all but prefetch=2"
    assert len(settled) == 5 and app.ledger_rows() == 5 and ready(channel, queue) == 0
