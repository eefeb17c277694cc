"""The exact SQL of the claim per dialect, compiled without a database (Oracle included)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle, postgresql, sqlite
from sqlalchemy.exc import CompileError

from sa_inbox import Inbox
from sa_inbox.dialects import (
    MergeInsertOrSkip,
    MySQLClaim,
    OracleClaim,
    PostgreSQLClaim,
    SavepointClaim,
    SQLiteClaim,
    claim_dialect_for,
)

COLUMNS = "message_id, consumer_name, message_type, correlation_id, payload_hash"
KEY = ("message_id", "consumer_name")


@pytest.fixture
def table() -> sa.Table:
    return Inbox(sa.MetaData()).table


def sql(statement: object, dialect: sa.Dialect) -> str:
    return str(statement.compile(dialect=dialect))  # type: ignore[attr-defined]


def single(claim: object, table: sa.Table) -> object:
    return claim.insert_or_skip(table)  # type: ignore[attr-defined]


def bound(claim: object, table: sa.Table, columns: tuple[str, ...] = KEY) -> Any:
    """The single-row statement with ``columns`` bound by name, as an execution binds them.

    A batch is this statement (plus ``RETURNING``) sent as an executemany: SQLAlchemy's
    "insertmanyvalues" repeats its VALUES clause per row at execution.
    """
    return single(claim, table).values(  # type: ignore[attr-defined]
        {c: sa.bindparam(c) for c in columns}
    )


def test_registry_picks_each_backend() -> None:
    assert isinstance(claim_dialect_for("postgresql"), PostgreSQLClaim)
    assert isinstance(claim_dialect_for("mysql"), MySQLClaim)
    assert isinstance(claim_dialect_for("mariadb"), MySQLClaim)
    assert isinstance(claim_dialect_for("oracle"), OracleClaim)
    assert isinstance(claim_dialect_for("sqlite"), SQLiteClaim)
    fallback = claim_dialect_for("mssql")
    assert isinstance(fallback, SavepointClaim) and fallback.native is None
    forced = claim_dialect_for("postgresql", "savepoint")
    assert isinstance(forced, SavepointClaim) and isinstance(forced.native, PostgreSQLClaim)
    with pytest.raises(ValueError, match="strategy"):
        claim_dialect_for("sqlite", "upsert")  # type: ignore[arg-type]


def test_postgresql(table: sa.Table) -> None:
    claim = PostgreSQLClaim()
    statement = bound(claim, table, tuple(COLUMNS.split(", ")))
    assert sql(statement, postgresql.dialect()) == (
        f"INSERT INTO inbox_processed_messages ({COLUMNS}) VALUES (%(message_id)s::VARCHAR, "
        "%(consumer_name)s::VARCHAR, %(message_type)s::VARCHAR, %(correlation_id)s::VARCHAR, "
        "%(payload_hash)s) ON CONFLICT (message_id, consumer_name) DO NOTHING"
    )
    batch = bound(claim, table).returning(table.c.message_id)
    assert sql(batch, postgresql.dialect()) == (
        "INSERT INTO inbox_processed_messages (message_id, consumer_name) VALUES "
        "(%(message_id)s::VARCHAR, %(consumer_name)s::VARCHAR) "
        "ON CONFLICT (message_id, consumer_name) DO NOTHING "
        "RETURNING inbox_processed_messages.message_id"
    )


def test_mysql_and_mariadb(table: sa.Table) -> None:
    claim = MySQLClaim()
    assert sql(bound(claim, table), mysql.dialect()) == (
        "INSERT IGNORE INTO inbox_processed_messages (message_id, consumer_name) VALUES (%s, %s)"
    )
    mariadb = mysql.dialect(is_mariadb=True)
    batch = bound(claim, table).returning(table.c.message_id)
    assert sql(batch, mariadb) == (
        "INSERT IGNORE INTO inbox_processed_messages (message_id, consumer_name) "
        "VALUES (%s, %s) RETURNING inbox_processed_messages.message_id"
    )


def test_sqlite(table: sa.Table) -> None:
    batch = bound(SQLiteClaim(), table).returning(table.c.message_id)
    assert sql(batch, sqlite.dialect()) == (
        "INSERT INTO inbox_processed_messages (message_id, consumer_name) VALUES (?, ?) "
        "ON CONFLICT (message_id, consumer_name) DO NOTHING RETURNING message_id"
    )


def test_oracle_merge(table: sa.Table) -> None:
    statement = single(OracleClaim(), table)
    assert sql(statement, oracle.dialect()) == (
        "MERGE INTO inbox_processed_messages t USING (SELECT :message_id AS message_id, "
        ":consumer_name AS consumer_name, :message_type AS message_type, "
        ":correlation_id AS correlation_id, :payload_hash AS payload_hash FROM dual) s "
        "ON (t.message_id = s.message_id AND t.consumer_name = s.consumer_name) "
        f"WHEN NOT MATCHED THEN INSERT ({COLUMNS}) VALUES (s.message_id, s.consumer_name, "
        "s.message_type, s.correlation_id, s.payload_hash)"
    )


def test_oracle_merge_quotes_and_schema() -> None:
    table = Inbox(sa.MetaData(), table_name="Inbox Rows", schema="app").table
    compiled = sql(MergeInsertOrSkip(table, ["message_id", "consumer_name"]), oracle.dialect())
    assert compiled.startswith('MERGE INTO app."Inbox Rows" t USING (SELECT :message_id AS')


def test_oracle_merge_refuses_other_dialects(table: sa.Table) -> None:
    statement = single(OracleClaim(), table)
    for dialect in (postgresql.dialect(), mysql.dialect(), sqlite.dialect()):
        with pytest.raises(CompileError, match="Oracle only"):
            sql(statement, dialect)
    with pytest.raises(ValueError, match="primary key"):
        MergeInsertOrSkip(table, ["message_id"])


def test_oracle_merge_is_cached(table: sa.Table) -> None:
    one = MergeInsertOrSkip(table, ["message_id", "consumer_name"])
    two = MergeInsertOrSkip(table, ["message_id", "consumer_name"])
    other = MergeInsertOrSkip(table, ["message_id", "consumer_name", "message_type"])
    assert one._generate_cache_key() == two._generate_cache_key()
    assert one._generate_cache_key() != other._generate_cache_key()


def test_savepoint_fallback_is_a_plain_insert(table: sa.Table) -> None:
    assert sql(bound(SavepointClaim(), table), postgresql.dialect()) == (
        "INSERT INTO inbox_processed_messages (message_id, consumer_name) "
        "VALUES (%(message_id)s::VARCHAR, %(consumer_name)s::VARCHAR)"
    )


def test_oracle_ddl(table: sa.Table) -> None:
    ddl = sql(sa.schema.CreateTable(table), oracle.dialect())
    assert "message_id VARCHAR2(255 CHAR) NOT NULL" in ddl
    assert "received_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP NOT NULL" in ddl
    assert "CONSTRAINT pk_inbox_processed_messages PRIMARY KEY (message_id, consumer_name)" in ddl


@pytest.mark.parametrize(
    "dialect", [postgresql.dialect(), mysql.dialect(), oracle.dialect(), sqlite.dialect()]
)
def test_mixin_table_has_the_same_ddl_as_the_factory(dialect: sa.Dialect) -> None:
    from sqlalchemy.orm import DeclarativeBase

    from sa_inbox import InboxMessageMixin

    class Base(DeclarativeBase):
        pass

    class Processed(InboxMessageMixin, Base):
        __tablename__ = "inbox_processed_messages"

    mapped: sa.Table = Processed.__table__  # type: ignore[assignment]
    table = Inbox(sa.MetaData()).table
    assert sql(sa.schema.CreateTable(mapped), dialect) == sql(sa.schema.CreateTable(table), dialect)
    indexes = [sql(sa.schema.CreateIndex(ix), dialect) for ix in mapped.indexes]
    assert indexes == [sql(sa.schema.CreateIndex(ix), dialect) for ix in table.indexes]
