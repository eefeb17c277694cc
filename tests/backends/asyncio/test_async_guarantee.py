"""The transaction guard through an AsyncSession, on every async driver.

A handler of :func:`sa_inbox.asyncio.handle` that ends the transaction holding the claim
(``await session.commit()``, ``await (await session.connection()).commit()``, ``await
session.rollback()`` then writing, …) is FAILED and nacked, nothing of the attempt commits,
the pooled connection carries nothing into the next transaction, and the redelivery to a
correct handler applies the payment once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from sa_inbox import Outcome, Result
from sa_inbox.asyncio import handle
from sa_inbox.exc import HandlerEndedTransaction
from tests.backends.asyncio.test_async import run
from tests.backends.runner.test_guarantee import Broker
from tests.support.app import CONSUMER, App, hand_over

pytestmark = pytest.mark.backend

AsyncHandler = Callable[[AsyncSession], Awaitable[None]]


def ending_handlers(app: App) -> dict[str, AsyncHandler]:
    async def pay(session: AsyncSession) -> None:
        await app.apply_payment_async(session, "m1", 1, Decimal(3))

    async def session_commit(session: AsyncSession) -> None:
        await pay(session)
        await session.commit()

    async def connection_commit(session: AsyncSession) -> None:
        await pay(session)
        await (await session.connection()).commit()

    async def caught_session_commit(session: AsyncSession) -> None:
        await pay(session)
        with contextlib.suppress(HandlerEndedTransaction):  # swallowed: still refused
            await session.commit()

    async def caught_connection_commit(session: AsyncSession) -> None:
        await pay(session)
        with contextlib.suppress(HandlerEndedTransaction):  # swallowed: still refused
            await (await session.connection()).commit()

    async def session_rollback_then_write(session: AsyncSession) -> None:
        await session.rollback()
        await pay(session)

    async def connection_rollback_then_write(session: AsyncSession) -> None:
        await (await session.connection()).rollback()
        await pay(session)

    async def begin_block(session: AsyncSession) -> None:
        async with session.begin():
            await pay(session)

    return {name: f for name, f in locals().items() if callable(f) and name not in ("pay", "app")}


async def deliver(Session: Any, app: App, handler: AsyncHandler) -> tuple[Result, Broker]:
    broker = Broker()
    result = await handle(
        Session, app.inbox, "m1", CONSUMER, handler, ack=broker.ack, nack=broker.nack
    )
    return result, broker


@pytest.mark.parametrize(
    "kind",
    [
        "session_commit",
        "connection_commit",
        "caught_session_commit",
        "caught_connection_commit",
        "session_rollback_then_write",
        "connection_rollback_then_write",
        "begin_block",
    ],
)
def test_handler_ending_the_transaction_fails_and_loses_nothing(
    app: App, async_url: str, kind: str
) -> None:
    handler = ending_handlers(app)[kind]

    async def correct(session: AsyncSession) -> None:
        await app.apply_payment_async(session, "m1", 1, Decimal(3))

    async def scenario(engine: AsyncEngine) -> None:
        Session = async_sessionmaker(engine)
        result, broker = await deliver(Session, app, handler)
        assert result.outcome is Outcome.FAILED, result
        assert (broker.acks, broker.nacks) == (0, 1)
        # Nothing of the attempt committed: not the claim, not the payment.
        assert app.inbox_rows() == 0 and app.ledger_rows() == 0 and app.balance(1) == 0
        # The one pooled connection carries nothing over into the next transaction either.
        async with engine.begin() as conn:
            await conn.execute(
                app.accounts.update().where(app.accounts.c.id == 2).values(balance=1)
            )
        assert app.inbox_rows() == 0 and app.ledger_rows() == 0
        # The broker redelivers: a correct handler applies the payment exactly once.
        hand_over(app.inbox, app.engine, correct)
        result, broker = await deliver(Session, app, correct)
        assert result.outcome is Outcome.PROCESSED and (broker.acks, broker.nacks) == (1, 0)
        result, broker = await deliver(Session, app, correct)
        assert result.outcome is Outcome.DUPLICATE and (broker.acks, broker.nacks) == (1, 0)

    run(async_url, scenario, pool_size=1, max_overflow=0)
    assert app.ledger_rows("m1") == 1 and app.balance(1) == Decimal(3) and app.inbox_rows() == 1
