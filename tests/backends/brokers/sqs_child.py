"""An SQS consumer process for the crash tests:
``python -m tests.backends.brokers.sqs_child DB_URL SQS_URL QUEUE DEAD_QUEUE MODE [async]``.

It consumes ``QUEUE`` with :class:`Consumer` (or, with ``async``, :class:`AsyncConsumer` on
the async ``DB_URL``), the visibility timeout :data:`VISIBILITY_TIMEOUT`, and prints one
line per settlement: ``DISPOSITION COUNT``.

MODE ``crash-after-commit``: the message's change commits, then the consumer's delete of
the receive's committed messages prints ``COMMITTED`` and SIGKILLs the process before
``DeleteMessageBatch``. MODE ``deliver``: settles the first message it gets and exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

import sqlalchemy as sa
from aiobotocore.session import get_session
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox.brokers import Settlement
from sa_inbox.brokers.sqs import AsyncConsumer, Consumer, client_options
from sa_inbox.brokers.sqs import aio as aio_module
from sa_inbox.brokers.sqs import consumer as sync_module
from tests.backends.brokers.payments import pay, pay_async
from tests.backends.brokers.sqs_support import sqs_client
from tests.support.app import CONSUMER, App
from tests.support.child import say
from tests.support.options import with_options

VISIBILITY_TIMEOUT = 1
DEADLINE = 20.0


def report(settlement: Settlement) -> None:
    say(f"{settlement.disposition.value} {settlement.delivery.delivery_count}")


def options(dead: str) -> dict[str, Any]:
    return {
        "consumer_name": CONSUMER,
        "dead_letter": dead,
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "wait_time": 1,
        "on_settled": report,
    }


def crash_in_delete(info: Any, messages: Any) -> Any:
    if messages:
        say("COMMITTED")
        os.kill(os.getpid(), signal.SIGKILL)  # committed, never deleted
    yield from ()


def main_sync(db_url: str, sqs_url: str, queue: str, dead: str) -> None:
    app = App(sa.create_engine(db_url))
    reader = Consumer(
        sqs_client(sqs_url),
        queue,
        session_factory=app.Session,
        inbox=app.inbox,
        handler=pay(app),
        **with_options(options(dead)),
    )
    deadline = time.monotonic() + DEADLINE
    while not reader.poll() and time.monotonic() < deadline:
        pass
    reader.close()


async def main_async(db_url: str, sqs_url: str, queue: str, dead: str) -> None:
    engine = create_async_engine(db_url)
    app = App(engine.sync_engine)
    async with get_session().create_client("sqs", **client_options(sqs_url)) as client:
        reader = AsyncConsumer(
            client,
            queue,
            session_factory=async_sessionmaker(engine),
            inbox=app.inbox,
            handler=pay_async(app),
            **with_options(options(dead)),
        )
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while not await reader.poll() and asyncio.get_running_loop().time() < deadline:
            pass
        await reader.aclose()
    await engine.dispose()


if __name__ == "__main__":
    db_url, sqs_url, queue, dead, mode = sys.argv[1:6]
    asynchronous = sys.argv[6:] == ["async"]
    if mode == "crash-after-commit":
        setattr(aio_module if asynchronous else sync_module, "delete", crash_in_delete)  # noqa: B010
    if asynchronous:
        asyncio.run(main_async(db_url, sqs_url, queue, dead))
    else:
        main_sync(db_url, sqs_url, queue, dead)
