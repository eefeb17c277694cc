"""The asyncio consumer process for the crash tests:
``python -m tests.backends.asyncio.crash_child ASYNC_URL ID MODE``.

The modes and lines of :mod:`tests.backends.claim.crash_child`, through
:func:`sa_inbox.asyncio.handle` on an AsyncEngine with an ``async def`` handler and ack.
"""

from __future__ import annotations

import asyncio
import sys

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from sa_inbox.asyncio import handle
from tests.backends.claim.crash_child import AMOUNT, say
from tests.support.app import CONSUMER, App


async def main(url: str, message_id: str, mode: str) -> None:
    engine = create_async_engine(url)
    app = App(engine.sync_engine)  # its tables and inbox; every statement below is awaited

    async def handler(session: AsyncSession) -> None:
        await app.apply_payment_async(session, message_id, 1, AMOUNT)
        if mode == "crash-before-commit":
            await session.flush()
            say("APPLIED")
            await asyncio.sleep(120)

    async def ack() -> None:
        if mode == "crash-after-commit":
            say("COMMITTED")
            await asyncio.sleep(120)  # killed here: committed, never acked
        say("ACKED")

    result = await handle(
        async_sessionmaker(engine),
        app.inbox,
        message_id,
        CONSUMER,
        handler,
        ack=ack,
        nack=lambda: None,
    )
    say(result.outcome.value)
    await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
