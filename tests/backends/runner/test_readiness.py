"""The readiness check (:mod:`sa_inbox.readiness`) on each database, sync and async drivers:
a right setup passes and leaves nothing behind; each wrong one raises its configuration
error before a message is touched."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox.brokers.kafka import kafka_tables
from sa_inbox.exc import AutocommitConnection, InvalidHandler, InvalidSessionFactory, MissingTable
from sa_inbox.readiness import check_ready, check_ready_async, inbox_tables
from tests.backends.asyncio import conftest as async_fixtures
from tests.support.app import App

pytestmark = pytest.mark.backend

async_url = async_fixtures.async_url
sync_url = async_fixtures.sync_url
async_app = async_fixtures.app

ENTRY = "the test's consumer"


def handler(session: Session, message: object) -> None:
    """A handler of the right shape."""


def test_a_right_setup_passes_and_leaves_no_row_and_no_transaction(app: App) -> None:
    assert check_ready(app.Session, inbox_tables(app.inbox), entry=ENTRY, handler=handler) is None
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    with app.engine.connect() as conn:  # the pool's connection was rolled back and returned
        assert conn.scalar(sa.select(sa.func.count()).select_from(app.inbox.table)) == 0


def test_a_missing_table_is_found(app: App) -> None:
    app.inbox.table.drop(app.engine)
    with pytest.raises(MissingTable):
        check_ready(app.Session, inbox_tables(app.inbox), entry=ENTRY)


def test_a_missing_kafka_table_names_the_function_that_defines_it(app: App) -> None:
    tables = kafka_tables(app.inbox)  # defined after the app created its tables: not created
    with pytest.raises(MissingTable, match=r"inbox_kafka_attempts.*kafka_tables\(inbox\)"):
        check_ready(app.Session, [app.inbox.table, tables.attempts], entry=ENTRY)
    assert app.inbox_rows() == 0


@pytest.mark.parametrize("wrong", ["the Session class", "an unbound sessionmaker"])
def test_a_factory_of_sessions_with_no_engine_is_refused(app: App, wrong: str) -> None:
    factory: Any = {"the Session class": Session, "an unbound sessionmaker": sessionmaker()}[wrong]
    with pytest.raises(InvalidSessionFactory, match="has no engine for table"):
        check_ready(factory, inbox_tables(app.inbox), entry=ENTRY)


def test_a_missing_key_column_is_found(app: App) -> None:
    """A table of that name made by hand without ``consumer_name``: the query selects the
    primary key's columns, so the database says the column does not exist."""
    app.inbox.table.drop(app.engine)
    with app.engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {app.inbox.table.name} (message_id VARCHAR(20))")
    try:
        with pytest.raises(MissingTable):
            check_ready(app.Session, inbox_tables(app.inbox), entry=ENTRY)
    finally:
        with app.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {app.inbox.table.name}")
        app.inbox.table.create(app.engine)


def test_an_autocommit_engine_is_refused(app: App) -> None:
    factory = sessionmaker(app.engine.execution_options(isolation_level="AUTOCOMMIT"))
    with pytest.raises(AutocommitConnection):
        check_ready(factory, inbox_tables(app.inbox), entry=ENTRY)


@pytest.mark.parametrize("wrong", ["Session.begin", "sessionmaker.begin", "AsyncSession maker"])
def test_a_factory_that_makes_no_session_is_refused(app: App, wrong: str) -> None:
    factory: Any = {
        "Session.begin": Session.begin,
        "sessionmaker.begin": app.Session.begin,
        "AsyncSession maker": lambda: AsyncSession(),  # a callable of the user's
    }[wrong]
    with pytest.raises(InvalidSessionFactory):
        check_ready(factory, inbox_tables(app.inbox), entry=ENTRY)


def test_a_handler_of_the_wrong_shape_is_refused(app: App) -> None:
    with pytest.raises(InvalidHandler, match="cannot be called as handler"):
        check_ready(app.Session, [], entry=ENTRY, handler=lambda session: None)


def test_async_a_right_setup_passes(async_url: str, async_app: App) -> None:
    async def main() -> None:
        engine = create_async_engine(async_url)
        try:
            factory = async_sessionmaker(engine)
            tables = inbox_tables(async_app.inbox)
            assert await check_ready_async(factory, tables, entry=ENTRY, handler=handler) is None
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert async_app.inbox_rows() == 0


@pytest.mark.parametrize("wrong", ["missing table", "AUTOCOMMIT", "sessionmaker", "makes Session"])
def test_async_each_wrong_setup_is_refused(async_url: str, async_app: App, wrong: str) -> None:
    expected: type[Exception] = {
        "missing table": MissingTable,
        "AUTOCOMMIT": AutocommitConnection,
    }.get(wrong, InvalidSessionFactory)
    if wrong == "missing table":
        async_app.inbox.table.drop(async_app.engine)

    async def main() -> None:
        engine = create_async_engine(async_url)
        factory: Any = {
            "AUTOCOMMIT": async_sessionmaker(
                engine.execution_options(isolation_level="AUTOCOMMIT")
            ),
            "sessionmaker": async_app.Session,
            "makes Session": lambda: Session(),
        }.get(wrong, async_sessionmaker(engine))
        try:
            with pytest.raises(expected):
                await check_ready_async(factory, inbox_tables(async_app.inbox), entry=ENTRY)
        finally:
            await engine.dispose()

    asyncio.run(main())
