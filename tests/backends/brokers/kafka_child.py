"""A Kafka consumer process for the crash tests:
``python -m tests.backends.brokers.kafka_child DB_URL SERVERS TOPIC GROUP OFFSETS MODE [N]``.

It consumes ``TOPIC`` in group ``GROUP`` with the sync :class:`Consumer`, or with the
:class:`AsyncConsumer` when ``DB_URL`` names an async driver (``sqlite+aiosqlite``,
``postgresql+asyncpg``, ...), ``offsets=OFFSETS`` (``kafka`` or ``database``) and the
tests' payment handler, printing one line per settlement:
``DISPOSITION DELIVERY_COUNT MESSAGE_ID``.

MODE ``crash-after-commit``: the first poll's transaction commits, then the process prints
``COMMITTED`` and SIGKILLs itself (a ``Session`` ``after_commit`` listener), before the
offsets are committed to the group. MODE ``deliver``: settles ``N`` records, then stops
(the offsets committed) and exits 0.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery, Settlement
from sa_inbox.brokers.kafka import AsyncConsumer, Consumer
from tests.backends.brokers.kafka_support import FAST_ASYNC, FAST_SYNC, kafka_tables
from tests.backends.brokers.payments import pay, pay_async
from tests.support.app import CONSUMER, App, sync_driver_url
from tests.support.child import say
from tests.support.options import with_options

DEADLINE = 60.0


def crashing(handler: Callable[..., Any]) -> Callable[..., Any]:
    """``handler``, marking its poll's session: the process prints ``COMMITTED`` and
    SIGKILLs itself once that session's transaction commits (before the offset commit)."""

    def die(session: Session) -> None:  # the outermost commit (not a savepoint's)
        if not session.in_nested_transaction() and session.info.pop("crash", False):
            say("COMMITTED")
            os.kill(os.getpid(), signal.SIGKILL)

    event.listen(Session, "after_commit", die)  # an AsyncSession's sync session's too

    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)  # the same handler, for the consumer name's owner
        async def marking_async(session: Any, delivery: Delivery) -> None:
            session.info["crash"] = True  # AsyncSession.info: its sync session's
            await handler(session, delivery)

        return marking_async

    @functools.wraps(handler)
    def marking(session: Session, delivery: Delivery) -> None:  # the poll's session
        session.info["crash"] = True
        handler(session, delivery)

    return marking


def main(
    db_url: str, servers: str, topic: str, group: str, offsets: str, mode: str, n: int
) -> None:
    url = sa.make_url(db_url)
    asynchronous = url.get_dialect().is_async
    app = App(sa.create_engine(sync_driver_url(url)))
    kafka_tables(app.inbox)
    settled: list[Settlement] = []

    def report(settlement: Settlement) -> None:
        settled.append(settlement)
        delivery = settlement.delivery
        say(f"{settlement.disposition.value} {delivery.delivery_count} {delivery.message_id}")

    handler = pay_async(app) if asynchronous else pay(app)
    if mode == "crash-after-commit":
        handler = crashing(handler)
    options: dict[str, Any] = {
        "bootstrap_servers": servers,
        "group_id": group,
        "consumer_name": CONSUMER,
        "inbox": app.inbox,
        "handler": handler,
        "offsets": offsets,
        "on_settled": report,
        "poll_timeout": 0.2,
    }
    if asynchronous:
        engine = create_async_engine(url, poolclass=sa.NullPool)
        consumer = AsyncConsumer(
            topic,
            session_factory=async_sessionmaker(engine),
            config=FAST_ASYNC,
            **with_options(options),
        )
        asyncio.run(run_async(consumer, settled, n))
    else:
        sync = Consumer(
            topic, session_factory=app.Session, config=FAST_SYNC, **with_options(options)
        )
        run_sync(sync, settled, n)
    app.engine.dispose()


def run_sync(consumer: Consumer, settled: list[Settlement], n: int) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while len(settled) < n and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    time.sleep(0.5)  # no settlement beyond the expected ones
    stop.set()
    thread.join(30)


async def run_async(consumer: AsyncConsumer, settled: list[Settlement], n: int) -> None:
    task = asyncio.create_task(consumer.run())
    deadline = time.monotonic() + DEADLINE
    while len(settled) < n and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # no settlement beyond the expected ones
    consumer.stop()
    await asyncio.wait_for(task, 30)


if __name__ == "__main__":
    db, servers, topic, group, offsets, mode = sys.argv[1:7]
    main(db, servers, topic, group, offsets, mode, int(sys.argv[7]) if len(sys.argv) > 7 else 1)
