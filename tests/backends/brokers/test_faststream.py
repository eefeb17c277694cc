"""The FastStream middleware in a real FastStream worker process against the live RabbitMQ,
Redis and NATS JetStream brokers, on PostgreSQL and MariaDB.

One flow per broker and database shares three worker processes
(:mod:`tests.backends.brokers.faststream_child`): duplicate publishes, a message without the
key, a worker SIGKILLed after the commit and before the ack, a worker SIGKILLed before the
commit; then the business state (ledger, balance, claims) and the broker's state (nothing
left or pending, the keyless message alone in the dead-letter queue / stream).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any

import pytest
import sqlalchemy as sa

from sa_inbox.brokers import DeliveryOptions
from tests.conftest import backend_url, broker_url
from tests.support.app import App

from .workers import Worker

pytestmark = pytest.mark.backend

KEY = "idempotency-key"
ASYNC_DRIVERS = {"postgresql": "postgresql+asyncpg", "mysql": "mysql+aiomysql"}


@pytest.fixture(params=list(ASYNC_DRIVERS))
def db(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[tuple[str, App]]:
    """(the async URL for the worker, the payments app on the sync driver)."""
    url = sa.make_url(backend_url(request.param, tmp_path))
    engine = sa.create_engine(url)
    app = App(engine)
    app.reset()
    yield url.set(drivername=ASYNC_DRIVERS[request.param]).render_as_string(False), app
    app.drop()
    engine.dispose()


# -- each broker's side of the test: declare, publish, inspect, delete --------------------


def _unique(prefix: str = "") -> str:
    nats_prefix = os.environ.get("SA_INBOX_TEST_NATS_PREFIX", "")
    return f"{nats_prefix + '_' if nats_prefix else ''}{prefix}fs_{uuid.uuid4().hex[:10]}"


async def _publish(kind: str, url: str, name: str, messages: list[tuple[str | None, str]]) -> None:
    """Publishes ``(key, amount)`` payments with FastStream, as a producer would."""
    broker: Any
    if kind == "rabbit":
        from faststream.rabbit import RabbitBroker

        broker = RabbitBroker(url, logger=None)
    elif kind == "redis":
        from faststream.redis import RedisBroker

        broker = RedisBroker(url, logger=None)
    else:
        from faststream.nats import NatsBroker

        broker = NatsBroker(url, logger=None)
    async with broker:
        await broker.start()
        for key, amount in messages:
            headers = {KEY: key} if key is not None else {}
            body = {"account": 1, "amount": amount}
            if kind == "redis":
                await broker.publish(body, stream=name, headers=headers)
            else:
                await broker.publish(body, name, headers=headers)


class Rabbit:
    """A quorum queue (it counts deliveries) dead-lettering to ``<name>.dead``."""

    def __init__(self, url: str) -> None:
        import pika

        self.name = _unique()
        self.connection = pika.BlockingConnection(pika.URLParameters(url))
        self.channel = self.connection.channel()
        self.channel.queue_declare(self.name + ".dead")
        self.channel.queue_declare(
            self.name,
            durable=True,
            arguments={
                "x-queue-type": "quorum",
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self.name + ".dead",
            },
        )

    def left(self) -> int:
        """Messages ready or unacked in the queue (no consumer is connected)."""
        return int(self.channel.queue_declare(self.name, passive=True).method.message_count)

    def dead_letters(self) -> list[tuple[dict[str, Any], str]]:
        found = []
        while True:
            method, properties, body = self.channel.basic_get(self.name + ".dead", auto_ack=True)
            if method is None:
                return found
            reason = properties.headers["x-death"][0]["reason"]
            found.append((json.loads(body), str(reason)))

    def delete(self) -> None:
        self.channel.queue_delete(self.name)
        self.channel.queue_delete(self.name + ".dead")
        self.connection.close()


class Redis:
    """A stream (the worker makes its group ``g``) and its ``<name>:dead-letter`` stream."""

    def __init__(self, url: str) -> None:
        import redis

        self.name = _unique()
        self.client = redis.Redis.from_url(url)

    def left(self) -> int:
        """Entries of group ``g`` delivered and not acked."""
        return int(self.client.xpending(self.name, "g")["pending"])

    def dead_letters(self) -> list[tuple[dict[str, Any], str]]:
        from faststream.redis.parser import BinaryMessageFormatV1

        found = []
        for _, fields in self.client.xrange(self.name + ":dead"):
            body, _headers = BinaryMessageFormatV1.parse(fields[b"__data__"])  # FastStream's
            found.append((json.loads(body), fields[b"dead_letter_reason"].decode()))
        return found

    def delete(self) -> None:
        self.client.delete(self.name, self.name + ":dead")
        self.client.close()


class Nats:
    """A stream, and a stream of its consumers' MSG_TERMINATED advisories (the dead letters,
    NATS docs "JetStream Consumers" → "Dead Letter Queues")."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = _unique()
        self.dlq = self.name + "_dlq"
        self.advisories = f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{self.name}.*"
        self._run(self._create())

    def _run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    async def _js(self) -> Any:
        import nats

        self.nc = await nats.connect(self.url)
        return self.nc.jetstream()

    async def _create(self) -> None:
        js = await self._js()
        await js.add_stream(name=self.name, subjects=[self.name])
        await js.add_stream(name=self.dlq, subjects=[self.advisories])
        await self.nc.close()

    async def _left(self) -> int:
        """Messages not acked: those delivered and unacked plus those past the consumer's
        delivered sequence, read from the consumer's state rather than ``num_pending``, a
        running count the server keeps apart from it."""
        js = await self._js()
        info = await js.consumer_info(self.name, "d")
        last = (await js.stream_info(self.name)).state.last_seq
        await self.nc.close()
        return int(info.num_ack_pending + last - info.delivered.stream_seq)

    def left(self) -> int:
        return int(self._run(self._left()))

    async def _dead(self) -> list[tuple[dict[str, Any], str]]:
        js = await self._js()
        found = []
        info = await js.stream_info(self.dlq)
        for seq in range(
            info.state.first_seq, info.state.last_seq + 1 if info.state.messages else 0
        ):
            advisory = json.loads((await js.get_msg(self.dlq, seq)).data)
            original = await js.get_msg(self.name, advisory["stream_seq"])
            found.append((json.loads(original.data), "terminated"))
        await self.nc.close()
        return found

    def dead_letters(self) -> list[tuple[dict[str, Any], str]]:
        return list(self._run(self._dead()))

    async def _delete(self) -> None:
        js = await self._js()
        await js.delete_stream(self.name)
        await js.delete_stream(self.dlq)
        await self.nc.close()

    def delete(self) -> None:
        self._run(self._delete())


KEYLESS, POISON = {"account": 1, "amount": "5.00"}, {"account": 1, "amount": "not-a-number"}
#: What each broker's dead-letter path holds at the end, with its reason.
DEAD_LETTERS = {
    "rabbit": [(KEYLESS, "rejected"), (POISON, "rejected")],  # x-death's reason
    "redis": [(KEYLESS, "missing_message_id"), (POISON, "delivery_limit")],
    "nats": [(KEYLESS, "terminated"), (POISON, "terminated")],  # MSG_TERMINATED advisories
}

SIDES = {"rabbit": (Rabbit, "rabbitmq"), "redis": (Redis, "redis"), "nats": (Nats, "nats")}


def worker(kind: str, url: str, db_url: str, name: str, crash: str = "-") -> Worker:
    child = "tests.backends.brokers.faststream_child"
    started = Worker([sys.executable, "-m", child, kind, url, db_url, name, crash])
    started.expect(["READY"])
    return started


@pytest.mark.parametrize("kind", list(SIDES))
def test_worker_applies_each_payment_once_through_duplicates_and_crashes(
    kind: str, db: tuple[str, App]
) -> None:
    db_url, app = db
    side_class, broker_name = SIDES[kind]
    url = broker_url(broker_name)
    side = side_class(url)
    workers: list[Worker] = []
    try:
        # 1. duplicates, a keyless message, and a crash after the commit of pay-crash
        workers.append(first := worker(kind, url, db_url, side.name, "after-commit:pay-crash"))
        _run_publish(kind, url, side.name, [("pay-1", "10.00"), ("pay-1", "10.00")])
        _run_publish(kind, url, side.name, [(None, "5.00")])
        first.expect(["processed pay-1", "duplicate pay-1", "dead_lettered None"])
        _run_publish(kind, url, side.name, [("pay-crash", "1.00")])
        first.expect(["COMMITTED pay-crash"])
        first.kill()
        assert app.ledger_rows("pay-crash") == 1, "committed before the kill"

        # 2. a new worker gets pay-crash again: acked as a duplicate; then it dies in pay-3
        workers.append(second := worker(kind, url, db_url, side.name, "before-commit:pay-3"))
        second.expect(["duplicate pay-crash"])
        _run_publish(kind, url, side.name, [("pay-3", "3.00")])
        second.expect(["APPLIED pay-3"])
        second.kill()
        assert app.ledger_rows("pay-3") == 0, "rolled back by the kill"

        # 3. a third worker gets pay-3 again and applies it; a poison message fails on every
        #    delivery the broker counts and is dead-lettered at the third, pay-4 gets through
        workers.append(third := worker(kind, url, db_url, side.name))
        third.expect(["processed pay-3"])
        _run_publish(kind, url, side.name, [("poison", "not-a-number"), ("pay-4", "4.00")])
        third.expect(["retry poison", "retry poison", "dead_lettered poison", "processed pay-4"])
        assert third.quiet(0.3) == []
        third.stop()

        keys = ("pay-1", "pay-crash", "pay-3", "pay-4", "poison")
        assert [app.ledger_rows(k) for k in keys] == [1, 1, 1, 1, 0]
        assert app.ledger_rows() == 4, "neither the keyless nor the poison payment applied"
        assert app.balance(1) == Decimal("18.00")
        assert app.inbox_rows() == 4, "no claim for the dead letters"
        assert side.left() == 0, "everything settled: nothing ready, nothing unacked"
        assert side.dead_letters() == DEAD_LETTERS[kind]
    finally:
        for started in workers:
            started.ensure_dead()
        side.delete()


def _run_publish(kind: str, url: str, name: str, messages: list[tuple[str | None, str]]) -> None:
    asyncio.run(_publish(kind, url, name, messages))


async def _message_ids_of_two_publishes(kind: str, url: str) -> list[str]:
    """The ``message_id`` FastStream's consumer sees for two publishes of one payload
    without a producer-set id (RabbitMQ: an auto-deleted queue; Redis: a list; NATS: a core
    subject)."""
    from faststream import Context

    name = _unique()
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(body: dict[str, Any], message: Annotated[Any, Context("message")]) -> None:
        seen.append(message.message_id)
        if len(seen) == 2:
            done.set()

    broker: Any
    if kind == "rabbit":
        from faststream.rabbit import RabbitBroker, RabbitQueue

        broker = RabbitBroker(url, logger=None)
        broker.subscriber(RabbitQueue(name, auto_delete=True))(handler)
    elif kind == "redis":
        from faststream.redis import RedisBroker

        broker = RedisBroker(url, logger=None)
        broker.subscriber(list=name)(handler)
    else:
        from faststream.nats import NatsBroker

        broker = NatsBroker(url, logger=None)
        broker.subscriber(name)(handler)
    async with broker:
        await broker.start()
        for _ in range(2):
            if kind == "redis":
                await broker.publish({"account": 1}, list=name)
            else:
                await broker.publish({"account": 1}, name)
        await asyncio.wait_for(done.wait(), timeout=10)
    return seen


@pytest.mark.parametrize("kind", list(SIDES))
def test_faststream_invents_a_message_id_when_the_producer_sets_none(kind: str) -> None:
    """Why the middleware keys on a header: FastStream's ``message_id`` is never empty, it is
    a fresh random id on each publish, so two publishes of one payment would both apply."""
    first, second = asyncio.run(_message_ids_of_two_publishes(kind, broker_url(SIDES[kind][1])))
    assert first and second and first != second


async def _refused_with_ack_first(url: str) -> tuple[list[str], list[logging.LogRecord]]:
    """A RabbitMQ subscriber with ``AckPolicy.ACK_FIRST`` (a no-ack consumer) and the
    middleware, in this process: the handler's calls and FastStream's error logs."""
    from faststream import AckPolicy
    from faststream.rabbit import RabbitBroker, RabbitQueue
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    from sa_inbox import Inbox
    from sa_inbox.brokers.faststream import InboxMiddleware

    engine = create_async_engine("sqlite+aiosqlite://")  # never reached
    records: list[logging.LogRecord] = []
    logger = logging.getLogger(f"faststream_test_{uuid.uuid4().hex}")
    handler_ = logging.Handler()
    handler_.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler_)
    middleware = InboxMiddleware(
        session_factory=async_sessionmaker(engine), inbox=Inbox(sa.MetaData()), consumer_name="c"
    )
    broker = RabbitBroker(url, middlewares=[middleware], logger=logger)
    called: list[str] = []

    queue = RabbitQueue(_unique(), auto_delete=True)

    @broker.subscriber(queue, ack_policy=AckPolicy.ACK_FIRST)
    async def pay(body: dict[str, Any]) -> None:
        called.append("pay")

    async with broker:
        await broker.start()
        await broker.publish({"account": 1}, queue.name, headers={KEY: "pay-1"})
        deadline = asyncio.get_running_loop().time() + 10
        while not any(r.levelno >= logging.ERROR for r in records):
            assert asyncio.get_running_loop().time() < deadline, "no error logged"
            await asyncio.sleep(0.02)
    await engine.dispose()
    return called, [r for r in records if r.levelno >= logging.ERROR]


def test_ack_first_is_refused() -> None:
    """``AckPolicy.ACK_FIRST`` acks before the handler: the middleware refuses to run it."""
    called, errors = asyncio.run(_refused_with_ack_first(broker_url("rabbitmq")))
    assert called == []
    assert "ConfigurationError" in errors[0].getMessage()
    assert "AckPolicy.MANUAL" in errors[0].getMessage()


# -- a misspelled key header: the run of keyless messages stops the subscriber --------------

MAX_KEYLESS = 3
#: Seconds between two keyless publishes: no time ends a run.
GAP = 0.8


async def _keyless_run(kind: str, url: str, db_url: str, name: str) -> tuple[Any, list[str]]:
    """A FastStream broker in this process, its middleware reading the misspelled header
    ``payment_id`` (the producer sets ``idempotency-key``): MAX_KEYLESS + 1 messages, one
    every GAP seconds. Returns the middleware's ``check()`` error and the dispositions."""
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

    from sa_inbox.brokers.faststream import InboxMiddleware
    from tests.backends.brokers.faststream_child import make_broker

    engine = create_async_engine(db_url)
    app = App(sa.create_engine(sa.make_url(db_url).set(drivername=SYNC_DRIVERS[db_url[:5]])))
    settled: list[str] = []
    middleware = InboxMiddleware(
        session_factory=async_sessionmaker(engine),
        inbox=app.inbox,
        consumer_name="billing",
        options=DeliveryOptions(
            key_source="payment_id",
            max_keyless=MAX_KEYLESS,
            on_settled=lambda s: settled.append(s.disposition.value),
        ),
    )

    async def pay(body: dict[str, Any], session: AsyncSession) -> None:
        raise AssertionError("no keyless message reaches the handler")

    broker = make_broker(kind, url, name, middleware, pay)
    try:
        async with broker:
            await broker.start()
            await asyncio.sleep(1)  # the subscribers are consuming
            for n in range(MAX_KEYLESS + 1):
                await _publish(kind, url, name, [(f"pay-{n}", "1.00")])
                await asyncio.sleep(GAP)
            await asyncio.sleep(1)
            try:
                await middleware.check()
                error: Any = None
            except Exception as exc:
                error = exc
    finally:
        await engine.dispose()
        app.engine.dispose()
    return error, settled


SYNC_DRIVERS = {"postg": "postgresql+psycopg", "mysql": "mysql+pymysql"}


def _unread(side: Any) -> int:
    """Redis: entries not yet delivered to group ``g`` (XINFO GROUPS ``lag``)."""
    (group,) = side.client.xinfo_groups(side.name)
    return int(group["lag"])


@pytest.mark.parametrize("kind", list(SIDES))
def test_a_run_of_keyless_messages_spread_over_time_stops_the_subscriber(
    kind: str, db: tuple[str, App]
) -> None:
    """A misspelled key header on a quiet queue: FastStream settles each message before it
    delivers the next, so the first MAX_KEYLESS - 1 are dead-lettered as they come; the
    run counts on across the gaps and the MAX_KEYLESS-th is given back, the subscriber
    stopped, ``check()`` failing with MissingKeyHeader; the one after is never taken."""
    from sa_inbox.exc import MissingKeyHeader

    db_url, app = db
    side_class, broker_name = SIDES[kind]
    url = broker_url(broker_name)
    side = side_class(url)
    try:
        error, settled = asyncio.run(_keyless_run(kind, url, db_url, side.name))
        assert isinstance(error, MissingKeyHeader), error
        assert (error.deliveries, error.dead_lettered) == (MAX_KEYLESS, MAX_KEYLESS - 1)
        assert settled == ["dead_lettered"] * (MAX_KEYLESS - 1)
        assert (app.ledger_rows(), app.inbox_rows()) == (0, 0)
        assert len(side.dead_letters()) == MAX_KEYLESS - 1
        # the MAX_KEYLESS-th given back (Redis: still pending), the next never taken
        unread = _unread(side) if kind == "redis" else 0
        assert (side.left(), unread) == ((1, 1) if kind == "redis" else (2, 0))
    finally:
        side.delete()
