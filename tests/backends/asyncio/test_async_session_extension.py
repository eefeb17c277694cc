"""The session extension's savepoint rules on an ``async_sessionmaker`` with
:func:`sa_inbox.asyncio.install`, on every async driver: the sync suite's ORM model and
assertions, each step awaited.

A rolled-back savepoint keeps the outer claim; a claim first emitted inside a savepoint that
rolls back is emitted again; a caught :class:`~sa_inbox.DuplicateMessage` still refuses the
commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from sa_inbox import DuplicateMessage
from sa_inbox.asyncio import install, register_claim
from sa_inbox.session import pending_claims
from tests.backends.asyncio.test_async import run
from tests.backends.runner.test_session_extension import (
    Base,
    LedgerEntry,
    _sqlite_savepoints,
    orm_rows,
)
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


@pytest.fixture
def orm_app(app: App) -> Iterator[App]:
    Base.metadata.drop_all(app.engine)
    Base.metadata.create_all(app.engine)
    yield app
    Base.metadata.drop_all(app.engine)


def installed(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """An installed async_sessionmaker; on aiosqlite, SQLAlchemy's savepoint recipe first."""
    _sqlite_savepoints(engine.sync_engine)
    Session = async_sessionmaker(engine, expire_on_commit=False)
    install(Session)
    return Session


async def pay_with_savepoint(
    Session: async_sessionmaker[AsyncSession],
    app: App,
    message_id: str,
    *,
    flush_in_savepoint: bool,
) -> None:
    async with Session.begin() as session:
        register_claim(session, app.inbox, message_id, CONSUMER)
        with pytest.raises(ValueError):
            async with session.begin_nested():
                if flush_in_savepoint:
                    session.add(LedgerEntry(id=None, message_id=message_id, amount=Decimal(1)))
                    await session.flush()  # the claim is emitted here, inside the savepoint
                raise ValueError("a failed optional step")
        session.add(LedgerEntry(message_id=message_id, amount=Decimal(5)))


@pytest.mark.parametrize("flush_in_savepoint", [False, True])
def test_savepoint_rollback_never_loses_the_claim(
    orm_app: App, async_url: str, flush_in_savepoint: bool
) -> None:
    async def scenario(engine: AsyncEngine) -> None:
        Session = installed(engine)
        await pay_with_savepoint(Session, orm_app, "m1", flush_in_savepoint=flush_in_savepoint)
        assert orm_app.inbox_rows() == 1 and orm_rows(orm_app) == 1
        with pytest.raises(DuplicateMessage):
            await pay_with_savepoint(Session, orm_app, "m1", flush_in_savepoint=flush_in_savepoint)

    run(async_url, scenario)
    assert orm_app.inbox_rows() == 1 and orm_rows(orm_app) == 1


def test_registering_twice_in_one_transaction_claims_once(orm_app: App, async_url: str) -> None:
    async def scenario(engine: AsyncEngine) -> None:
        async with installed(engine).begin() as session:
            register_claim(session, orm_app.inbox, "m1", CONSUMER)
            session.add(LedgerEntry(message_id="m1", amount=Decimal(5)))
            await session.flush()
            register_claim(session, orm_app.inbox, "m1", CONSUMER)  # e.g. a retried step
            assert pending_claims(session.sync_session) == []

    run(async_url, scenario)
    assert orm_app.inbox_rows() == 1 and orm_rows(orm_app) == 1


def test_a_caught_duplicate_still_refuses_the_commit(orm_app: App, async_url: str) -> None:
    async def scenario(engine: AsyncEngine) -> None:
        Session = installed(engine)
        async with Session.begin() as session:
            register_claim(session, orm_app.inbox, "m1", CONSUMER)
            session.add(LedgerEntry(message_id="m1", amount=Decimal(5)))
        async with Session() as session:
            await session.begin()
            register_claim(session, orm_app.inbox, "m1", CONSUMER)
            session.add(LedgerEntry(message_id="m1", amount=Decimal(5)))
            with pytest.raises(DuplicateMessage):
                await session.flush()
            with pytest.raises(DuplicateMessage):
                await session.commit()  # the caller ignored the duplicate: refused
            await session.rollback()

    run(async_url, scenario)
    assert orm_app.inbox_rows() == 1 and orm_rows(orm_app) == 1
