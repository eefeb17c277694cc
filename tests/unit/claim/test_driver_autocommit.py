"""The per-driver autocommit probes, on real driver connections where the
running Python has them; the live scenarios are in tests/backends/runner/test_guarantee.py."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

from sa_inbox.dialects import MySQLClaim, PostgreSQLClaim, SQLiteClaim, claim_dialect_for


def test_sqlite_legacy_mode_is_transactional(tmp_path: object) -> None:
    conn = sqlite3.connect(f"{tmp_path}/a.db")
    try:
        assert SQLiteClaim().driver_autocommit(conn) is False
    finally:
        conn.close()


def test_sqlite_isolation_level_none_is_autocommit_until_begin(tmp_path: object) -> None:
    conn = sqlite3.connect(f"{tmp_path}/a.db", isolation_level=None)
    try:
        assert SQLiteClaim().driver_autocommit(conn) is True
        conn.execute("BEGIN")  # SQLAlchemy's pysqlite recipe: explicit BEGIN
        assert SQLiteClaim().driver_autocommit(conn) is False
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_sqlite_autocommit_attribute_rule() -> None:
    """Python 3.12's ``autocommit=True`` attribute, on a stand-in where 3.11 runs the suite."""
    probe = SQLiteClaim().driver_autocommit
    assert probe(SimpleNamespace(in_transaction=False, isolation_level="", autocommit=True))
    assert not probe(SimpleNamespace(in_transaction=False, isolation_level="", autocommit=-1))


def test_mysql_reads_get_autocommit() -> None:
    assert MySQLClaim().driver_autocommit(SimpleNamespace(get_autocommit=lambda: True))
    assert not MySQLClaim().driver_autocommit(SimpleNamespace(get_autocommit=lambda: False))


def test_postgresql_reads_the_autocommit_attribute() -> None:
    assert PostgreSQLClaim().driver_autocommit(SimpleNamespace(autocommit=True))
    assert not PostgreSQLClaim().driver_autocommit(SimpleNamespace(autocommit=False))


def test_savepoint_strategy_uses_the_native_probe(tmp_path: object) -> None:
    conn = sqlite3.connect(f"{tmp_path}/a.db", isolation_level=None)
    try:
        assert claim_dialect_for("sqlite", "savepoint").driver_autocommit(conn) is True
    finally:
        conn.close()
