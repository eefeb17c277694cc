"""``ClaimDialect.driver_state``: what each driver's connection reports of itself, read
without a round trip, on real connections (psycopg, PyMySQL and sqlite3; asyncpg, psycopg
async, aiomysql and aiosqlite). :mod:`sa_inbox.pool_guard` invalidates a connection on it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from sa_inbox.dialects import DriverState, backend_for
from tests.backends.asyncio.conftest import DRIVERS
from tests.conftest import backend_url
from tests.support.app import App
from tests.support.sleep import sleep_sql

pytestmark = pytest.mark.backend


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def app(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[App]:
    engine = sa.create_engine(backend_url(request.param, tmp_path))
    app = App(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def state(bind: sa.Connection, dbapi_connection: Any = None) -> DriverState | None:
    dbapi_connection = dbapi_connection or bind.connection.dbapi_connection
    return backend_for(bind.dialect.name).claim.driver_state(dbapi_connection)


def test_idle_then_in_a_transaction_then_idle(app: App) -> None:
    with app.engine.connect() as conn:
        assert state(conn) is DriverState.IDLE
        app.apply_payment(conn, "m1", 1, Decimal(1))
        assert state(conn) is DriverState.IN_TRANSACTION
        conn.rollback()
        assert state(conn) is DriverState.IDLE


def test_a_closed_connection_is_broken(app: App) -> None:
    with app.engine.connect() as conn:
        dbapi_connection = conn.connection.dbapi_connection
        dbapi_connection.close()
        assert state(conn, dbapi_connection) is DriverState.BROKEN
        conn.invalidate()


def test_a_psycopg_stream_left_open_is_busy(tmp_path: object) -> None:
    engine = sa.create_engine(backend_url("postgresql", tmp_path))
    try:
        with engine.connect() as conn:
            cursor = conn.connection.dbapi_connection.cursor()
            rows = cursor.stream("SELECT generate_series(1, 100000)")
            next(rows)
            assert state(conn) is DriverState.BUSY  # PQTRANS_ACTIVE
            rows.close()  # psycopg reads the rest of the result
            assert state(conn) is DriverState.IN_TRANSACTION
    finally:
        engine.dispose()


@pytest.fixture(params=list(DRIVERS))
def async_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    backend, driver = DRIVERS[request.param]
    url = sa.make_url(backend_url(backend, tmp_path))
    return url.set(drivername=driver).render_as_string(hide_password=False)


async def adapted(conn: AsyncConnection) -> Any:
    return (await conn.get_raw_connection()).dbapi_connection


def async_state(conn: AsyncConnection, dbapi_connection: Any) -> DriverState | None:
    return backend_for(conn.dialect.name).claim.driver_state(dbapi_connection)


def test_an_async_driver_reports_its_state(async_url: str) -> None:
    """Idle, in a transaction, and busy while another task runs a statement on it (the
    statement runs under SQLAlchemy's adapter lock)."""

    async def main() -> list[DriverState | None]:
        engine = create_async_engine(async_url)
        sleep_sql(engine, 0)  # SQLite: its sleep function, on every new connection
        seen: list[DriverState | None] = []
        try:
            async with engine.connect() as conn:
                dbapi_connection = await adapted(conn)
                seen.append(async_state(conn, dbapi_connection))
                # a write: the transaction begins on every backend (InnoDB at the first
                # transactional table touched, pysqlite before a write)
                await conn.execute(sa.text("CREATE TEMPORARY TABLE probe (x INTEGER)"))
                await conn.execute(sa.text("INSERT INTO probe VALUES (1)"))
                seen.append(async_state(conn, dbapi_connection))
                statement = sa.text(sleep_sql(engine, 0.3))
                running = asyncio.create_task(conn.execute(statement))
                await asyncio.sleep(0.05)
                seen.append(async_state(conn, dbapi_connection))
                await running
                await conn.rollback()
                seen.append(async_state(conn, dbapi_connection))
        finally:
            await engine.dispose()
        return seen

    idle, in_transaction, busy, after = (
        DriverState.IDLE,
        DriverState.IN_TRANSACTION,
        DriverState.BUSY,
        DriverState.IDLE,
    )
    assert asyncio.run(main()) == [idle, in_transaction, busy, after]
