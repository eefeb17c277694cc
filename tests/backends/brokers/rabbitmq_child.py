"""A RabbitMQ consumer process for the crash tests:
``python -m tests.backends.brokers.rabbitmq_child CLIENT AMQP_URL DB_URL QUEUE MODE``.

CLIENT ``chaos`` runs the chaos driver's :meth:`~sa_inbox.chaos.drivers.rabbitmq.Driver.consume`
(MODE ignored) until SIGTERM, paying each body's amount, printing each settlement. CLIENT
``pika`` runs :class:`~sa_inbox.brokers.rabbitmq.Consumer` on DB_URL (a sync
URL), ``aio-pika`` runs :class:`~sa_inbox.brokers.rabbitmq.AsyncConsumer` (an async URL).
The handler pays :data:`AMOUNT` into account 1 under the delivery's message_id.

MODE ``crash-after-commit``: the settler's ack prints ``COMMITTED`` and SIGKILLs this process
before the real ``basic.ack`` (committed, never acked). MODE ``crash-before-commit``: the
handler applies the change, flushes, prints ``APPLIED`` and SIGKILLs this process (nothing
committed). MODE ``deliver``: settles one delivery normally and prints
``DISPOSITION DELIVERY_COUNT``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery, Settlement
from sa_inbox.brokers.rabbitmq import (
    AioPikaSettler,
    AsyncConsumer,
    Consumer,
    PikaSettler,
)
from sa_inbox.chaos.drivers import driver_for
from tests.support.app import CONSUMER, App
from tests.support.child import say
from tests.support.options import with_options

AMOUNT = Decimal("42.00")


def die(line: str) -> None:
    say(line)
    os.kill(os.getpid(), signal.SIGKILL)


def crash_in_ack(*_: Any) -> None:
    die("COMMITTED")


def main(client: str, amqp_url: str, db_url: str, queue: str, mode: str) -> None:
    if client == "chaos":
        return drive(amqp_url, db_url, queue)
    if mode == "crash-after-commit":
        PikaSettler.ack = crash_in_ack  # type: ignore[method-assign]
        AioPikaSettler.ack = crash_in_ack  # type: ignore[method-assign,assignment]
    consumers: list[Any] = []

    def settled(settlement: Settlement) -> None:
        say(f"{settlement.disposition.value} {settlement.delivery.delivery_count}")
        consumers[0].stop()

    if client == "pika":
        engine = sa.create_engine(db_url)
        app = App(engine)

        def handler(session: Session, delivery: Delivery) -> None:
            app.apply_payment(session, delivery.message_id or "", 1, AMOUNT)
            if mode == "crash-before-commit":
                session.flush()
                die("APPLIED")

        consumers.append(
            Consumer(amqp_url, queue, handler=handler, **with_options(common(app, settled)))
        )
        consumers[0].run()
        return

    async def run() -> None:
        engine = create_async_engine(db_url)
        app = App(engine.sync_engine)

        async def handler(session: AsyncSession, delivery: Delivery) -> None:
            await app.apply_payment_async(session, delivery.message_id or "", 1, AMOUNT)
            if mode == "crash-before-commit":
                await session.flush()
                die("APPLIED")

        kw = common(app, settled) | {"session_factory": async_sessionmaker(engine)}
        consumers.append(AsyncConsumer(amqp_url, queue, handler=handler, **with_options(kw)))
        await consumers[0].run()
        await engine.dispose()

    asyncio.run(run())


def drive(amqp_url: str, db_url: str, queue: str) -> None:
    app = App(sa.create_engine(db_url))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def handler(session: Session, delivery: Delivery) -> None:
        if delivery.body == b"poison":
            raise RuntimeError("poison")
        app.apply_payment(session, delivery.message_id or "", 1, Decimal(delivery.body.decode()))
        time.sleep(0.005)  # a kill lands mid-stream

    def settled(settlement: Settlement) -> None:
        say(f"{settlement.disposition.value} {settlement.delivery.message_id}")

    driver = driver_for(amqp_url)
    try:
        driver.consume(
            queue,
            session_factory=app.Session,
            inbox=app.inbox,
            consumer_name=CONSUMER,
            handler=handler,
            max_deliveries=3,
            on_settled=settled,
            stop=stop,
        )
    finally:
        driver.close()
    say("STOPPED")


def common(app: App, settled: Any) -> dict[str, Any]:
    return {
        "session_factory": app.Session,
        "inbox": app.inbox,
        "consumer_name": CONSUMER,
        "prefetch": 1,
        "on_settled": settled,
    }


if __name__ == "__main__":
    main(*sys.argv[1:6])
