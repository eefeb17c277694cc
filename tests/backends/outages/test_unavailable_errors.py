"""Which real errors mean "the database cannot be reached" (sa_inbox.outage.is_unavailable,
each backend's ClaimDialect.is_unavailable), and which do not: a refused connection for
every driver, a pool timeout, a backend terminated by an administrator (PostgreSQL 57P01,
MariaDB's KILL), a read-only transaction (PostgreSQL 25006); a duplicate key or a missing
table is never an outage. These kill no server: they run beside other tests."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from sa_inbox.outage import is_unavailable
from tests.conftest import backend_url

pytestmark = pytest.mark.backend

SYNC = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}
ASYNC = {"postgresql": "postgresql+asyncpg", "mysql": "mysql+aiomysql"}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def url_of(backend: str, tmp_path: Path, driver: str, port: int | None = None) -> str:
    url = sa.make_url(backend_url(backend, tmp_path)).set(drivername=driver)
    if port is not None:
        url = url.set(port=port)
    return url.render_as_string(hide_password=False)


def error_of(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return exc
    raise AssertionError("no error")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_refused_connection_is_unavailable_for_each_driver(backend: str, tmp_path: Path) -> None:
    port = closed_port()
    engine = sa.create_engine(url_of(backend, tmp_path, SYNC[backend], port))
    assert is_unavailable(error_of(engine.connect), engine.dialect.name)

    async def connect() -> BaseException:
        aengine = create_async_engine(url_of(backend, tmp_path, ASYNC[backend], port))
        try:
            async with aengine.connect():
                pass
        except Exception as exc:
            return exc
        finally:
            await aengine.dispose()
        raise AssertionError("connected")

    assert is_unavailable(asyncio.run(connect()))  # asyncpg: ConnectionRefusedError


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_an_exhausted_pool_is_unavailable(backend: str, tmp_path: Path) -> None:
    engine = sa.create_engine(
        url_of(backend, tmp_path, SYNC[backend]), pool_size=1, max_overflow=0, pool_timeout=0.1
    )
    with engine.connect():
        error = error_of(engine.connect)
    assert isinstance(error, sa.exc.TimeoutError) and is_unavailable(error)
    engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_connection_killed_by_the_server_is_unavailable(backend: str, tmp_path: Path) -> None:
    """PostgreSQL's ``pg_terminate_backend`` (SQLSTATE 57P01, admin_shutdown), MariaDB's
    ``KILL`` (the client sees the connection lost: 2013 / a closed connection)."""
    url = url_of(backend, tmp_path, SYNC[backend])
    victim_engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    admin = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with victim_engine.connect() as victim:
        if backend == "postgresql":
            pid = victim.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            kill = f"SELECT pg_terminate_backend({pid})"
        else:
            pid = victim.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
            kill = f"KILL {pid}"
        with admin.connect() as conn:
            conn.exec_driver_sql(kill)
        error = error_of(lambda: victim.exec_driver_sql("SELECT 1"))
    assert is_unavailable(error, victim_engine.dialect.name), repr(error)


def test_a_read_only_transaction_is_unavailable(tmp_path: Path) -> None:
    """SQLSTATE 25006 (read_only_sql_transaction): what a standby answers a write."""
    engine = sa.create_engine(url_of("postgresql", tmp_path, SYNC["postgresql"]))
    with engine.connect() as conn:
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        error = error_of(lambda: conn.exec_driver_sql("CREATE TEMPORARY TABLE ro (n int)"))
    assert getattr(error, "orig", None) is not None and error.orig.sqlstate == "25006"  # type: ignore[attr-defined]
    assert is_unavailable(error, "postgresql")
    engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_duplicate_key_or_a_missing_table_is_no_outage(backend: str, tmp_path: Path) -> None:
    engine = sa.create_engine(url_of(backend, tmp_path, SYNC[backend]), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        missing = error_of(lambda: conn.exec_driver_sql("SELECT * FROM no_such_table_here"))
    assert not is_unavailable(missing, engine.dialect.name)
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TEMPORARY TABLE dup (n int PRIMARY KEY)")
        conn.exec_driver_sql("INSERT INTO dup VALUES (1)")
        duplicate = error_of(lambda: conn.exec_driver_sql("INSERT INTO dup VALUES (1)"))
    assert not is_unavailable(duplicate, engine.dialect.name)
    assert not is_unavailable(ValueError("not the database"))
