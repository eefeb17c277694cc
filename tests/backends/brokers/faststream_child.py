"""A FastStream worker process for the FastStream tests:
``python -m tests.backends.brokers.faststream_child BROKER BROKER_URL ASYNC_DB_URL NAME CRASH``.

BROKER is ``rabbit``, ``redis`` or ``nats``; NAME the queue / stream / subject. The worker
runs a ``FastStream`` app whose broker has :class:`sa_inbox.brokers.faststream.InboxMiddleware`
and one payment subscriber (Redis: plus an ``XAUTOCLAIM`` one taking over entries a dead
worker left pending), and prints ``READY`` once consuming, then ``<disposition> <key>`` per
settled message. CRASH is ``-``, ``after-commit:KEY`` (prints ``COMMITTED KEY`` after the
commit of KEY and hangs before the ack) or ``before-commit:KEY`` (prints ``APPLIED KEY`` with
the change flushed, uncommitted, and hangs): the parent then SIGKILLs the worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from decimal import Decimal
from typing import Annotated, Any

from faststream import AckPolicy, Context, FastStream, Header
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from sa_inbox.brokers import DeliveryOptions, Settlement
from sa_inbox.brokers.faststream import InboxMiddleware
from tests.support.app import CONSUMER, App
from tests.support.child import say

#: Consumer-side timings of the tests (seconds): redelivery after a crash comes this soon.
ACK_WAIT = 2
MIN_IDLE_MS = 1000

#: FastStream's logs and errors go to stderr (stdout is the parent's protocol).
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
LOG = logging.getLogger("faststream_child")


def make_broker(kind: str, url: str, name: str, middleware: InboxMiddleware, pay: Any) -> Any:
    """The broker with the middleware, and ``pay`` subscribed to NAME."""
    if kind == "rabbit":
        from faststream.rabbit import QueueType, RabbitBroker, RabbitQueue

        rabbit = RabbitBroker(url, middlewares=[middleware], logger=LOG)
        queue = RabbitQueue(name, queue_type=QueueType.QUORUM, declare=False)
        rabbit.subscriber(queue, ack_policy=AckPolicy.MANUAL)(pay)
        return rabbit
    if kind == "redis":
        from faststream.redis import RedisBroker, StreamSub

        redis = RedisBroker(url, middlewares=[middleware], logger=LOG)
        consumer = f"worker-{os.getpid()}"
        redis.subscriber(stream=StreamSub(name, group="g", consumer=consumer))(pay)
        reclaim = StreamSub(
            name, group="g", consumer=consumer, min_idle_time=MIN_IDLE_MS, polling_interval=200
        )
        redis.subscriber(stream=reclaim)(pay)
        return redis
    from faststream.nats import ConsumerConfig, JStream, NatsBroker, PullSub

    nats = NatsBroker(url, middlewares=[middleware], logger=LOG)
    nats.subscriber(
        name,
        stream=JStream(name, subjects=[name], declare=False),
        durable="d",
        pull_sub=PullSub(batch_size=1, timeout=0.2),
        config=ConsumerConfig(ack_wait=ACK_WAIT),
        ack_policy=AckPolicy.MANUAL,
    )(pay)
    return nats


async def main(kind: str, broker_url: str, db_url: str, name: str, crash: str) -> None:
    engine = create_async_engine(db_url)
    app = App(engine.sync_engine)
    crash_mode, _, crash_key = crash.partition(":")

    def settled(settlement: Settlement) -> None:
        say(f"{settlement.disposition.value} {settlement.delivery.message_id}")

    middleware = InboxMiddleware(
        session_factory=async_sessionmaker(engine),
        inbox=app.inbox,
        consumer_name=CONSUMER,
        options=DeliveryOptions(max_deliveries=3, on_settled=settled),
    )

    async def pay(
        body: dict[str, Any],
        session: Annotated[AsyncSession, Context("inbox_session")],
        key: Annotated[str, Header("idempotency-key")],
    ) -> None:
        await app.apply_payment_async(session, key, int(body["account"]), Decimal(body["amount"]))
        if key == crash_key and crash_mode == "after-commit":
            event.listen(session.sync_session, "after_commit", lambda _: hang(f"COMMITTED {key}"))
        if key == crash_key and crash_mode == "before-commit":
            await session.flush()
            hang(f"APPLIED {key}")

    faststream_app = FastStream(make_broker(kind, broker_url, name, middleware, pay))
    faststream_app.after_startup(lambda: say("READY"))
    await faststream_app.run(log_level=logging.WARNING)
    await engine.dispose()


def hang(line: str) -> None:
    """Says ``line`` and blocks the whole process (the event loop too) until killed."""
    say(line)
    time.sleep(120)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
