"""Concurrent deliveries and the error classifier on every async driver.

The drivers' own errors must reach the dialect classifiers unchanged in meaning: asyncpg and
psycopg 3 async report SQLSTATE 40001 / 40P01, aiomysql 1213 / 1205, aiosqlite SQLITE_BUSY;
each comes out of the claim as :class:`~sa_inbox.TransientClaimError` and the retried
transaction succeeds. asyncpg errors have no ``diag``: the ``savepoint`` strategy's duplicate
detection reads the constraint name from the driver's own exception.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from sa_inbox import TransientClaimError
from sa_inbox.asyncio import AsyncInbox, run_in_transaction
from sa_inbox.backoff import Backoff
from tests.backends.asyncio.test_async import run
from tests.backends.claim.test_concurrency import AMOUNT, ISOLATION
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def sqlite_timeout(async_url: str, seconds: float = 30) -> dict[str, Any]:
    return {"connect_args": {"timeout": seconds}} if async_url.startswith("sqlite") else {}


@pytest.mark.parametrize("strategy", ["native", "savepoint"])
def test_concurrent_duplicate_exactly_one_commits(
    app: App, async_url: str, strategy: str, sync_url: str
) -> None:
    """Four tasks on four connections claim one id at a barrier; the winner holds its
    transaction open; the losers skip it as a duplicate only after the winner's commit
    (with ``savepoint``: the unique violation is recognised as the inbox's own key)."""
    app = App(app.engine, strategy=strategy)
    inbox = AsyncInbox(app.inbox)
    deliveries, hold = 4, 0.3

    async def scenario(engine: AsyncEngine) -> list[tuple[bool, float]]:
        barrier = asyncio.Barrier(deliveries)
        loop = asyncio.get_running_loop()

        async def deliver() -> tuple[bool, float]:
            async with async_sessionmaker(engine).begin() as session:
                await session.connection()
                await barrier.wait()
                claimed = await inbox.claim(session, "pay-1", CONSUMER)
                returned = loop.time()
                if claimed:
                    await app.apply_payment_async(session, "pay-1", 1, AMOUNT)
                    await asyncio.sleep(hold)
            return claimed, returned

        return list(await asyncio.wait_for(asyncio.gather(*(deliver() for _ in range(4))), 60))

    outcomes = run(async_url, scenario, **sqlite_timeout(async_url))
    assert sorted(c for c, _ in outcomes) == [False, False, False, True]
    if not async_url.startswith("sqlite"):  # SQLite's losers wait in BEGIN, not at the key
        winner = next(t for c, t in outcomes if c)
        assert all(t >= winner + hold * 0.9 for c, t in outcomes if not c)
    assert app.ledger_rows("pay-1") == 1 and app.balance(1) == AMOUNT and app.inbox_rows() == 1


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_snapshot_loser_is_transient_and_succeeds_on_retry(
    app: App, async_url: str, level: str
) -> None:
    """As the sync test of the same name: a delivery whose snapshot predates another
    delivery's commit of the same message. PostgreSQL aborts it with 40001 (asyncpg and
    psycopg async alike), raised as TransientClaimError; the retry sees the duplicate.
    MariaDB and SQLite skip it as a duplicate at once. The payment is applied once."""
    name = app.engine.dialect.name
    if level not in ISOLATION.get(name, []):
        level = ISOLATION[name][0]
    inbox = AsyncInbox(app.inbox)
    failures: list[TransientClaimError] = []
    attempts = 0

    async def scenario(engine: AsyncEngine) -> bool:
        factory = async_sessionmaker(engine.execution_options(isolation_level=level))

        async def other_delivery_commits() -> None:
            async with engine.begin() as conn:
                assert await inbox.claim(conn, "pay-1", CONSUMER)
                await app.apply_payment_async(conn, "pay-1", 1, AMOUNT)

        async def work(session: AsyncSession) -> bool:
            nonlocal attempts
            attempts += 1
            # The snapshot starts here, on a row the other delivery does not write.
            await session.execute(sa.select(app.accounts.c.balance).where(app.accounts.c.id == 3))
            if attempts == 1:
                await other_delivery_commits()
            try:
                claimed = await inbox.claim(session, "pay-1", CONSUMER)
            except TransientClaimError as exc:
                failures.append(exc)
                raise
            if claimed:
                await app.apply_payment_async(session, "pay-1", 1, AMOUNT)
            return claimed

        return await run_in_transaction(factory, work, retry_backoff=Backoff(0.01, 1.0))

    assert run(async_url, scenario, **sqlite_timeout(async_url)) is False
    assert app.ledger_rows("pay-1") == 1 and app.balance(1) == AMOUNT and app.inbox_rows() == 1
    if name == "postgresql":
        assert attempts == 2 and len(failures) == 1
        cause = failures[0].__cause__
        assert isinstance(cause, sa.exc.DBAPIError) and cause.orig.sqlstate == "40001"  # type: ignore[union-attr]
    else:
        assert attempts == 1 and not failures


def test_deadlocked_unit_of_work_is_retried(app: App, async_url: str) -> None:
    """As the sync test of the same name, with two tasks: two payments lock two accounts in
    opposite order; one is the deadlock victim (40P01 / 1213), retried, and both apply once."""
    if async_url.startswith("sqlite"):
        pytest.skip("SQLite locks the whole database: no row-lock deadlock")
    inbox = AsyncInbox(app.inbox)
    attempts = [0, 0]
    errors: list[BaseException] = []

    async def scenario(engine: AsyncEngine) -> list[bool]:
        barrier = asyncio.Barrier(2)
        Session = async_sessionmaker(engine)

        async def pay(index: int) -> bool:
            first, second = (1, 2) if index == 0 else (2, 1)
            message_id = f"transfer-{index}"

            async def work(session: AsyncSession) -> bool:
                attempts[index] += 1
                if not await inbox.claim(session, message_id, CONSUMER):
                    return False
                await app.apply_payment_async(session, message_id, first, AMOUNT)
                if attempts[index] == 1:
                    await barrier.wait()  # both hold their first account now
                try:
                    await app.apply_payment_async(session, message_id, second, -AMOUNT)
                except sa.exc.DBAPIError as exc:
                    errors.append(exc)
                    raise
                return True

            return await run_in_transaction(Session, work, retry_backoff=Backoff(0.01, 1.0))

        return list(await asyncio.wait_for(asyncio.gather(pay(0), pay(1)), 60))

    assert run(async_url, scenario) == [True, True]
    assert sum(attempts) == 3, f"one deadlock victim, retried once: {attempts}, {errors!r}"
    (error,) = errors
    if async_url.startswith("mysql"):
        assert error.orig.args[0] == 1213  # type: ignore[union-attr]
    else:
        assert error.orig.sqlstate == "40P01"  # type: ignore[union-attr]
    assert app.ledger_rows() == 4 and app.inbox_rows() == 2
    assert app.balance(1) == Decimal(0) and app.balance(2) == Decimal(0)


def test_lock_wait_is_transient_then_the_retry_claims(app: App, async_url: str) -> None:
    """A claim waiting on another transaction's uncommitted claim of the same key, past the
    lock wait limit: aiomysql's 1205, PostgreSQL's 55P03 (past ``lock_timeout``) and
    aiosqlite's SQLITE_BUSY are TransientClaimError; the retry after the holder rolls back
    claims and applies once."""
    inbox = AsyncInbox(app.inbox)
    is_sqlite = async_url.startswith("sqlite")

    async def scenario(engine: AsyncEngine) -> tuple[TransientClaimError, bool]:
        async with engine.connect() as holder:
            await holder.begin()
            assert await inbox.claim(holder, "pay-1", CONSUMER)
            async with engine.connect() as waiter, waiter.begin():
                if async_url.startswith("postgresql"):
                    await waiter.exec_driver_sql("SET LOCAL lock_timeout = '1s'")
                elif not is_sqlite:
                    await waiter.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1")
                with pytest.raises(TransientClaimError) as info:
                    await inbox.claim(waiter, "pay-1", CONSUMER)
            await holder.rollback()
        async with engine.begin() as conn:
            claimed = await inbox.claim(conn, "pay-1", CONSUMER)
            if claimed:
                await app.apply_payment_async(conn, "pay-1", 1, AMOUNT)
        return info.value, claimed

    error, claimed = run(async_url, scenario, **sqlite_timeout(async_url, 0.2))
    orig = error.__cause__.orig  # type: ignore[union-attr]
    if is_sqlite:
        assert orig.sqlite_errorcode & 0xFF == 5  # SQLITE_BUSY
    elif async_url.startswith("postgresql"):
        assert orig.sqlstate == "55P03"
    else:
        assert orig.args[0] == 1205
    assert claimed and app.ledger_rows("pay-1") == 1 and app.balance(1) == AMOUNT
    assert app.inbox_rows() == 1
