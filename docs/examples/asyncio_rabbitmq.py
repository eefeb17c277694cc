"""An asyncio RabbitMQ consumer on aio-pika (needs AMQP_URL; ASYNC_DATABASE_URL names an
async driver: postgresql+asyncpg, postgresql+psycopg, mysql+aiomysql, sqlite+aiosqlite)."""

import asyncio
import os
import signal

import aio_pika
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox import Inbox
from sa_inbox.brokers import DeliveryOptions
from sa_inbox.brokers.rabbitmq import AsyncConsumer, declare_queue_async

AMQP_URL = os.environ["AMQP_URL"]
metadata = sa.MetaData()
inbox = Inbox(metadata)
ledger = sa.Table("ledger", metadata, sa.Column("message_id", sa.String(255)))
engine = create_async_engine(os.environ.get("ASYNC_DATABASE_URL", "sqlite+aiosqlite:///aio.db"))
Session = async_sessionmaker(engine)


async def apply(session, delivery):  # the business change, on an AsyncSession
    await session.execute(ledger.insert().values(message_id=delivery.message_id))


async def publish(channel, payment_ids):
    for payment_id in payment_ids:  # the producer sets the key, the same on every retry
        message = aio_pika.Message(b"{}", message_id=payment_id)
        await channel.default_exchange.publish(message, routing_key="payments-aio")


async def main():
    async with engine.begin() as connection:
        await connection.run_sync(metadata.drop_all)
        await connection.run_sync(metadata.create_all)
    settled = []
    async with await aio_pika.connect(AMQP_URL) as connection:
        channel = await connection.channel()
        await channel.queue_delete("payments-aio")
        await declare_queue_async(channel, "payments-aio")  # quorum + dead letters
        await publish(channel, ["p-1", "p-2", "p-1"])
    consumer = AsyncConsumer(
        AMQP_URL,
        "payments-aio",
        session_factory=Session,
        inbox=inbox,
        consumer_name="billing",
        handler=apply,
        options=DeliveryOptions(max_deliveries=5, on_settled=settled.append),
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, consumer.stop)
    running = asyncio.create_task(consumer.run())  # until stop()
    while len(settled) < 3:
        await asyncio.sleep(0.05)
    consumer.stop()
    await running
    async with engine.connect() as connection:
        rows = await connection.scalar(sa.select(sa.func.count()).select_from(ledger))
    await engine.dispose()
    print([settlement.disposition.name for settlement in settled], rows)
    assert rows == 2


asyncio.run(main())
