"""The consumers run their readiness check before they consume, against the live Redis and
RabbitMQ, on each database: a wrong setup fails at once on an empty stream / queue (no
readiness probe passes while nothing arrives), before any command reaches the broker; once
fixed, ``check()`` passes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox.brokers.rabbitmq import AsyncConsumer, Consumer
from sa_inbox.brokers.redis import AsyncConsumer as AsyncRedisConsumer
from sa_inbox.brokers.redis import Consumer as RedisConsumer
from sa_inbox.exc import ConsumerNameTaken, MissingTable
from tests.backends.brokers import test_rabbitmq as rmq
from tests.backends.brokers import test_redis as rds
from tests.conftest import broker_url
from tests.support.app import CONSUMER, App
from tests.support.options import with_options

pytestmark = pytest.mark.backend

redis_url = rds.redis_url
client = rds.client
stream = rds.stream
aio_app = rds.aio_app
amqp_url = rmq.amqp_url
channel = rmq.channel
queue = rmq.queue


def test_redis_a_missing_table_fails_run_before_any_command(
    client: redis.Redis, stream: str, app: App
) -> None:
    app.inbox.table.drop(app.engine)
    consumer = RedisConsumer(
        client, stream, group=CONSUMER, session_factory=app.Session, inbox=app.inbox,
        handler=rds.pay(app), **rds.FAST,
    )  # fmt: skip
    with pytest.raises(MissingTable):
        consumer.run()
    assert client.exists(stream) == 0, "no group was made: nothing was sent to Redis"
    app.inbox.table.create(app.engine)
    assert consumer.check() is None


def test_redis_asyncio_a_missing_table_fails_run_before_any_command(
    client: redis.Redis, stream: str, aio_app: App, aio_url: str
) -> None:
    aio_app.inbox.table.drop(aio_app.engine)

    async def main() -> None:
        engine = create_async_engine(aio_url)
        aclient = redis.asyncio.Redis.from_url(broker_url("redis"))
        consumer = AsyncRedisConsumer(
            aclient, stream, group=CONSUMER, session_factory=async_sessionmaker(engine),
            inbox=aio_app.inbox, handler=rds.pay_async(aio_app), **rds.FAST,
        )  # fmt: skip
        try:
            with pytest.raises(MissingTable):
                await consumer.run()
            await asyncio.to_thread(aio_app.inbox.table.create, aio_app.engine)
            assert await consumer.check() is None
        finally:
            await aclient.aclose()
            await engine.dispose()

    asyncio.run(main())
    assert client.exists(stream) == 0


def test_rabbitmq_asyncio_a_missing_table_fails_run_on_an_empty_queue(
    channel: Any, queue: str, app: App
) -> None:
    app.inbox.table.drop(app.engine)

    async def main() -> None:
        engine = create_async_engine(rmq.async_url(app))
        kw = rmq.options(app, rmq.pay_async(app), None)
        kw["session_factory"] = async_sessionmaker(engine)
        consumer = AsyncConsumer(broker_url("rabbitmq"), queue, **with_options(kw))
        try:
            with pytest.raises(MissingTable):
                await asyncio.wait_for(consumer.run(), 10)
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert rmq.ready(channel, queue) == 0


def invoice(session: Any, delivery: Any) -> None:
    """A second handler of the consumer name ``pay`` owns (what a team writes by mistake)."""


def test_rabbitmq_a_handler_under_another_handlers_name_fails_run_before_a_delivery(
    channel: Any, queue: str, app: App, amqp_url: str
) -> None:
    """The owner check runs before consuming: the message waiting in the queue is never
    delivered for a refused run, so restarts of the refused consumer add nothing to its
    delivery count (RabbitMQ counts every return to a quorum queue)."""
    owner = rmq.pay(app)
    assert app.inbox.consumers is not None
    app.inbox.consumers.hand_over(app.engine, CONSUMER, owner)
    rmq.publish(channel, queue, "pay-1", b"1.00")
    for _ in range(3):  # a supervisor restarting it
        refused = Consumer(amqp_url, queue, **with_options(rmq.options(app, invoice, None)))
        with pytest.raises(ConsumerNameTaken):
            refused.run()
    method, properties, _ = rmq.get(channel, queue)
    assert not method.redelivered and (properties.headers or {}).get("x-delivery-count", 0) == 0
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_redis_a_missing_consumers_table_fails_run_before_any_command(
    client: redis.Redis, stream: str, app: App
) -> None:
    assert app.inbox.consumers is not None
    app.inbox.consumers.table.drop(app.engine)
    consumer = RedisConsumer(
        client, stream, group=CONSUMER, session_factory=app.Session, inbox=app.inbox,
        handler=rds.pay(app), **rds.FAST,
    )  # fmt: skip
    with pytest.raises(MissingTable, match="inbox_consumers"):
        consumer.run()
    assert client.exists(stream) == 0, "no group was made: nothing was sent to Redis"
    app.inbox.consumers.table.create(app.engine)
    assert consumer.check() is None
