"""A Redis Streams consumer process for the crash tests:
``python -m tests.backends.brokers.redis_child DB_URL REDIS_URL STREAM MODE [async]``.

It consumes ``STREAM`` (group ``billing``) with :class:`Consumer` (or, with
``async``, :class:`AsyncConsumer` on the async ``DB_URL``), the visibility timeout
:data:`VISIBILITY_TIMEOUT`, and prints one line per settlement: ``DISPOSITION COUNT``.

MODE ``crash-after-commit``: the handler's change commits, then the settler's ``ack()`` prints
``COMMITTED`` and SIGKILLs the process before ``XACK``. MODE ``crash-before-commit``: the
handler applies and flushes, prints ``APPLIED`` and SIGKILLs the process before the commit.
MODE ``deliver``: settles the first entry it gets (a pending one taken over by XAUTOCLAIM
once idle for the visibility timeout) and exits. MODE ``chaos``: consumes through the chaos
driver (:mod:`sa_inbox.chaos.drivers.redis`) with the tests' handler
(:func:`tests.backends.brokers.payments.pay`) until killed.
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

import redis
import redis.asyncio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery, Settlement
from sa_inbox.brokers.redis import AsyncConsumer, Consumer
from sa_inbox.brokers.redis.core import RedisSettler
from sa_inbox.chaos.drivers import driver_for
from tests.backends.brokers.payments import pay
from tests.support.app import CONSUMER, App
from tests.support.child import say
from tests.support.options import with_options

VISIBILITY_TIMEOUT = 0.5
DEADLINE = 20.0


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def report(settlement: Settlement) -> None:
    say(f"{settlement.disposition.value} {settlement.delivery.delivery_count}")


def options(stream: str) -> dict[str, Any]:
    return {
        "group": CONSUMER,
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "block_timeout": 0.2,
        "on_settled": report,
    }


def main_sync(db_url: str, redis_url: str, stream: str, mode: str) -> None:
    app = App(sa.create_engine(db_url))

    def handler(session: Session, delivery: Delivery) -> None:
        app.apply_payment(session, delivery.message_id or "", 1, Decimal(delivery.body.decode()))
        if mode == "crash-before-commit":
            session.flush()
            say("APPLIED")
            die()

    consumer = Consumer(
        redis.Redis.from_url(redis_url),
        stream,
        session_factory=app.Session,
        inbox=app.inbox,
        handler=handler,
        **with_options(options(stream)),
    )
    deadline = time.monotonic() + DEADLINE
    while not consumer.poll() and time.monotonic() < deadline:
        pass


async def main_async(db_url: str, redis_url: str, stream: str, mode: str) -> None:
    engine = create_async_engine(db_url)
    app = App(engine.sync_engine)

    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        amount = Decimal(delivery.body.decode())
        await app.apply_payment_async(session, delivery.message_id or "", 1, amount)
        if mode == "crash-before-commit":
            await session.flush()
            say("APPLIED")
            die()

    client = redis.asyncio.Redis.from_url(redis_url)
    consumer = AsyncConsumer(
        client,
        stream,
        session_factory=async_sessionmaker(engine),
        inbox=app.inbox,
        handler=handler,
        **with_options(options(stream)),
    )
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while not await consumer.poll() and asyncio.get_running_loop().time() < deadline:
        pass
    await client.aclose()
    await engine.dispose()


def main_chaos(db_url: str, redis_url: str, stream: str) -> None:
    app = App(sa.create_engine(db_url))
    driver_for(redis_url).consume(
        stream,
        session_factory=app.Session,
        inbox=app.inbox,
        consumer_name=CONSUMER,
        handler=pay(app),  # the test's own consumer takes over with this handler
        max_deliveries=5,
        on_settled=report,
        stop=threading.Event(),
    )


def crash_in_ack(self: RedisSettler) -> None:
    say("COMMITTED")
    die()  # committed, never acked


if __name__ == "__main__":
    db_url, redis_url, stream, mode = sys.argv[1:5]
    if mode == "crash-after-commit":
        RedisSettler.ack = crash_in_ack  # type: ignore[method-assign]
    if mode == "chaos":
        main_chaos(db_url, redis_url, stream)
    elif sys.argv[5:] == ["async"]:
        asyncio.run(main_async(db_url, redis_url, stream, mode))
    else:
        main_sync(db_url, redis_url, stream, mode)
