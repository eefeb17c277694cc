"""A JetStream consumer process for the NATS crash tests:
``python -m tests.backends.brokers.nats_child NATS_URL ASYNC_URL MODE MAX_DELIVERIES NAMES...``.

MODE ``crash-after-commit``: consumes; the handler's change commits, then the settler prints
``COMMITTED`` and hangs in ``ack()`` before the real ack, until the parent SIGKILLs it.
MODE ``crash-before-commit``: the handler applies and flushes the change, prints ``APPLIED``
and hangs before the commit. MODE ``deliver``: consumes one message normally and prints its
disposition, its reason (or ``-``) and its delivery count.
"""

from __future__ import annotations

import asyncio
import sys

import nats
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from sa_inbox.brokers import Delivery
from sa_inbox.brokers.nats import JetStreamSettler, consumer
from tests.backends.brokers.nats_support import Names, pay, run_consumer
from tests.backends.claim.crash_child import say
from tests.support.app import App


class HangingSettler(JetStreamSettler):
    """Says ``COMMITTED`` and hangs where the real ack would be sent."""

    async def ack(self) -> None:
        say("COMMITTED")
        await asyncio.sleep(120)


async def main(nats_url: str, async_url: str, mode: str, limit: str, *names: str) -> None:
    app = App(sa.create_engine("sqlite://"))  # its tables and inbox; the engine is unused
    applied = pay(app)

    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        await applied(session, delivery)
        if mode == "crash-before-commit":
            await session.flush()
            say("APPLIED")
            await asyncio.sleep(120)

    if mode == "crash-after-commit":
        consumer.JetStreamSettler = HangingSettler  # type: ignore[misc]
    nc = await nats.connect(nats_url)
    try:
        settled = await run_consumer(
            nc.jetstream(),
            Names(*names),
            async_url,
            app,
            settlements=1,
            handler=handler,
            max_deliveries=int(limit),
        )
    finally:
        await nc.close()
    for settlement in settled:
        reason = settlement.reason.value if settlement.reason else "-"
        say(f"{settlement.disposition.value} {reason} {settlement.delivery.delivery_count}")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
