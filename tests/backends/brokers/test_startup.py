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

from sa_inbox.brokers.rabbitmq import AsyncConsumer
from sa_inbox.brokers.redis import AsyncRedisStreamConsumer, RedisStreamConsumer
from sa_inbox.exc import MissingTable
from tests.backends.brokers import test_rabbitmq as rmq
from tests.backends.brokers import test_redis as rds
from tests.conftest import broker_url
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

redis_url = rds.redis_url
client = rds.client
stream = rds.stream
aio_url = rds.aio_url
aio_app = rds.aio_app
amqp_url = rmq.amqp_url
channel = rmq.channel
queue = rmq.queue


def test_redis_a_missing_table_fails_run_before_any_command(
    client: redis.Redis, stream: str, app: App
) -> None:
    app.inbox.table.drop(app.engine)
    consumer = RedisStreamConsumer(
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
        consumer = AsyncRedisStreamConsumer(
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
        consumer = AsyncConsumer(broker_url("rabbitmq"), queue, **kw)
        try:
            with pytest.raises(MissingTable):
                await asyncio.wait_for(consumer.run(), 10)
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert rmq.ready(channel, queue) == 0
