"""Which driver errors are duplicates and which are transient, per backend.

The drivers' own exception classes are built with the payloads their servers send
(PostgreSQL and MariaDB are also covered live in tests/backends/; Oracle's, on the driver of
the ``[oracle]`` extra, are in ``test_oracle_errors.py``).
"""

from __future__ import annotations

import sqlite3

import pymysql
import sqlalchemy as sa

from sa_inbox import Inbox
from sa_inbox.dialects import MySQLClaim, SavepointClaim, SQLiteClaim

TABLE = Inbox(sa.MetaData()).table


def wrap(orig: BaseException, cls: type[sa.exc.DBAPIError] = sa.exc.IntegrityError) -> object:
    return cls("INSERT …", {}, orig)


def test_mysql_classification() -> None:
    claim = MySQLClaim()
    dup = wrap(pymysql.IntegrityError(1062, "Duplicate entry 'a-b' for key 'PRIMARY'"))
    dup8 = wrap(
        pymysql.IntegrityError(
            1062, "Duplicate entry 'a-b' for key 'inbox_processed_messages.PRIMARY'"
        )
    )
    other_key = wrap(pymysql.IntegrityError(1062, "Duplicate entry 'x' for key 'uq_ref'"))
    assert claim.is_duplicate(dup, TABLE)  # type: ignore[arg-type]
    assert claim.is_duplicate(dup8, TABLE)  # type: ignore[arg-type]
    assert not claim.is_duplicate(other_key, TABLE)  # type: ignore[arg-type]
    for code in (1213, 1205):
        error = wrap(pymysql.OperationalError(code, "…"), sa.exc.OperationalError)
        assert claim.is_transient(error)  # type: ignore[arg-type]
    assert not claim.is_transient(wrap(pymysql.OperationalError(2013, "lost connection")))  # type: ignore[arg-type]


def test_sqlite_classification() -> None:
    claim = SQLiteClaim()
    pk = sqlite3.IntegrityError(
        "UNIQUE constraint failed: inbox_processed_messages.message_id, "
        "inbox_processed_messages.consumer_name"
    )
    pk.sqlite_errorcode = 1555  # type: ignore[attr-defined]
    assert claim.is_duplicate(wrap(pk), TABLE)  # type: ignore[arg-type]
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = 5  # type: ignore[attr-defined]
    assert claim.is_transient(wrap(busy, sa.exc.OperationalError))  # type: ignore[arg-type]
    snapshot = sqlite3.OperationalError("database is locked")
    snapshot.sqlite_errorcode = 517  # SQLITE_BUSY_SNAPSHOT  # type: ignore[attr-defined]
    assert claim.is_transient(wrap(snapshot, sa.exc.OperationalError))  # type: ignore[arg-type]


def test_unknown_backend_without_sqlstate_is_not_guessed() -> None:
    fallback = SavepointClaim(None)
    error = wrap(Exception("some unique violation"))
    assert not fallback.is_duplicate(error, TABLE)  # type: ignore[arg-type]
    assert not fallback.is_transient(error)  # type: ignore[arg-type]
