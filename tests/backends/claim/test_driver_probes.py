"""The driver probes are hook methods of the backend's dialect, on real driver connections:
MySQL's ``warning_count`` (MariaDB server) and SQLite's ``driver_in_transaction``. An async
driver supplies its own by overriding them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from sa_inbox.dialects import MySQLClaim, SQLiteClaim
from sa_inbox.dialects.sqlite import SQLiteStoreClaim
from tests.conftest import backend_url

pytestmark = pytest.mark.backend


@pytest.fixture
def mysql_engine(tmp_path: object) -> Iterator[sa.Engine]:
    engine = sa.create_engine(backend_url("mysql", tmp_path))
    yield engine
    engine.dispose()


def test_mysql_warning_count_reads_the_statements_warnings(mysql_engine: sa.Engine) -> None:
    claim = MySQLClaim()
    with mysql_engine.connect() as conn:
        clean = conn.execute(sa.text("SELECT 1"))
        clean.all()
        assert claim.warning_count(conn, clean) == 0
        warned = conn.execute(sa.text("SELECT CAST('1x' AS SIGNED)"))  # 1292: truncated
        warned.all()
        assert claim.warning_count(conn, warned) == 1
        assert claim.warning_count(conn, clean) == 0  # read from that statement's cursor


def test_mysql_execute_asks_the_hook(mysql_engine: sa.Engine) -> None:
    """``SHOW WARNINGS`` is sent only when the hook does not report zero."""

    class Blind(MySQLClaim):
        def warning_count(self, conn: sa.Connection, result: object) -> int | None:
            return None

    sent: list[str] = []
    with mysql_engine.connect() as conn:
        sa.event.listen(conn, "before_cursor_execute", lambda *a: sent.append(a[2]))
        MySQLClaim().execute(conn, sa.text("SELECT 1"), None)
        assert sent == ["SELECT 1"]
        Blind().execute(conn, sa.text("SELECT 1"), None)
        assert sent == ["SELECT 1", "SELECT 1", "SHOW WARNINGS"]


def test_sqlite_probe_follows_the_drivers_transaction(tmp_path: object) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/probe.db")
    try:
        with engine.connect() as conn:
            dbapi_connection = conn.connection.dbapi_connection
            assert SQLiteClaim().driver_in_transaction(dbapi_connection) is False
            SQLiteStoreClaim().begin_write(conn)  # BEGIN IMMEDIATE, asked through the hook
            assert SQLiteClaim().driver_in_transaction(dbapi_connection) is True
            conn.rollback()
            assert SQLiteClaim().driver_in_transaction(dbapi_connection) is False
    finally:
        engine.dispose()


def test_sqlite_hooks_share_one_probe(tmp_path: object) -> None:
    """An overridden ``driver_in_transaction`` is what the savepoint, the autocommit check and
    the store's ``BEGIN IMMEDIATE`` ask."""

    class Always(SQLiteClaim):
        def driver_in_transaction(self, dbapi_connection: object) -> bool:
            return True

    engine = sa.create_engine(f"sqlite:///{tmp_path}/probe.db")
    sent: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    try:
        with engine.connect() as conn:
            Always().before_savepoint(conn)
            SQLiteStoreClaim(Always()).begin_write(conn)
            assert sent == []
            assert Always().driver_autocommit(conn.connection.dbapi_connection) is False
            SQLiteStoreClaim().begin_write(conn)
            assert sent == ["BEGIN IMMEDIATE"]
            conn.rollback()
    finally:
        engine.dispose()
