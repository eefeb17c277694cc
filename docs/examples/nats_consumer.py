"""A NATS JetStream pull consumer, each message applied once (needs NATS_URL; the
database through an async driver, ASYNC_DATABASE_URL)."""

import asyncio
import contextlib
import os

import nats
import sqlalchemy as sa
from nats.js.errors import NotFoundError
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox import Inbox
from sa_inbox.brokers import DeliveryOptions
from sa_inbox.brokers.nats import AsyncConsumer

metadata = sa.MetaData()
inbox = Inbox(metadata)
ledger = sa.Table("ledger", metadata, sa.Column("message_id", sa.String(255)))
engine = create_async_engine(os.environ.get("ASYNC_DATABASE_URL", "sqlite+aiosqlite:///nats.db"))


async def apply(session, delivery):
    await session.execute(ledger.insert().values(message_id=delivery.message_id))


async def main():
    async with engine.begin() as connection:
        await connection.run_sync(metadata.drop_all)
        await connection.run_sync(metadata.create_all)
    client = await nats.connect(os.environ["NATS_URL"], max_reconnect_attempts=-1)
    js = client.jetstream()
    for stream in ("PAYMENTS", "PAYMENTS_DEAD"):
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(stream)  # fresh streams for the example
    await js.add_stream(name="PAYMENTS", subjects=["payments.in"])
    # dead letters need a stream that captures their subject, or none can be confirmed
    await js.add_stream(name="PAYMENTS_DEAD", subjects=["payments.dead"])

    # the producer sets the key header, the same on every retry of its publish:
    for payment_id in ("p-1", "p-2"):
        await js.publish("payments.in", b"{}", headers={"Nats-Msg-Id": payment_id})

    settled = []

    def on_settled(settlement):
        settled.append(settlement)
        if len(settled) == 2:
            consumer.stop()

    consumer = AsyncConsumer(
        js,
        "PAYMENTS",
        "billing",  # the durable consumer, and the inbox's consumer name
        session_factory=async_sessionmaker(engine),
        inbox=inbox,
        handler=apply,
        options=DeliveryOptions(dead_letter="payments.dead", on_settled=on_settled),
        fetch_timeout=0.5,
    )
    await consumer.run()  # until consumer.stop()
    await client.close()
    async with engine.connect() as connection:
        rows = await connection.scalar(sa.select(sa.func.count()).select_from(ledger))
    await engine.dispose()
    print([settlement.disposition.name for settlement in settled], rows)
    assert rows == 2


asyncio.run(main())
