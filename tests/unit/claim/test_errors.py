"""Which driver errors are duplicates and which are transient, per backend.

The drivers' own exception classes are built with the payloads their servers send (Oracle
has no server here; PostgreSQL and MariaDB are also covered live in tests/backends/).
"""

from __future__ import annotations

import sqlite3

import oracledb
import pymysql
import pytest
import sqlalchemy as sa
from oracledb.errors import _Error

from sa_inbox import Inbox, TransientClaimError
from sa_inbox.dialects import MySQLClaim, OracleClaim, SavepointClaim, SQLiteClaim

TABLE = Inbox(sa.MetaData()).table


def wrap(orig: BaseException, cls: type[sa.exc.DBAPIError] = sa.exc.IntegrityError) -> object:
    return cls("INSERT …", {}, orig)


def ora(code: int, message: str, cls: type[Exception] = oracledb.IntegrityError) -> object:
    return wrap(cls(_Error(message=message, code=code)))


@pytest.mark.parametrize(
    "message",
    [
        "ORA-00001: unique constraint (APP.PK_INBOX_PROCESSED_MESSAGES) violated",
        "ORA-00001: unique constraint (APP.PK_INBOX_PROCESSED_MESSAGES) violated on table "
        "APP.INBOX_PROCESSED_MESSAGES columns (MESSAGE_ID, CONSUMER_NAME)",
    ],
)
def test_oracle_duplicate_on_the_inbox_primary_key(message: str) -> None:
    assert OracleClaim().is_duplicate(ora(1, message), TABLE)  # type: ignore[arg-type]


def test_oracle_unique_violation_elsewhere_is_not_a_duplicate() -> None:
    other = ora(1, "ORA-00001: unique constraint (APP.UQ_LEDGER_REF) violated")
    assert not OracleClaim().is_duplicate(other, TABLE)  # type: ignore[arg-type]
    not_null = ora(1400, 'ORA-01400: cannot insert NULL into ("APP"."T"."X")')
    assert not OracleClaim().is_duplicate(not_null, TABLE)  # type: ignore[arg-type]


@pytest.mark.parametrize("code", [8177, 60])
def test_oracle_transient(code: int) -> None:
    error = ora(code, f"ORA-{code:05d}: …", oracledb.DatabaseError)
    assert OracleClaim().is_transient(error)  # type: ignore[arg-type]
    with pytest.raises(TransientClaimError), OracleClaim().translate_errors():
        raise error  # type: ignore[misc]


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
