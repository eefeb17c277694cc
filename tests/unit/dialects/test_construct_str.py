"""``str()`` of sa-inbox's custom constructs renders their own dialect's SQL
(``stringify_dialect``), as ``str()`` of SQLAlchemy's ``postgresql.insert()`` does."""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle

from sa_inbox import Inbox
from sa_inbox.dialects import MergeInsertOrSkip, claim_dialect_for
from sa_inbox.dialects.mysql import CausalSelect, DeleteOrderedLimit


def test_str_of_merge_is_oracle_sql() -> None:
    table = Inbox(sa.MetaData()).table
    statement = MergeInsertOrSkip(table, ["message_id", "consumer_name"])
    assert str(statement) == (
        "MERGE INTO inbox_processed_messages t USING (SELECT :message_id AS message_id, "
        ":consumer_name AS consumer_name FROM dual) s "
        "ON (t.message_id = s.message_id AND t.consumer_name = s.consumer_name) "
        "WHEN NOT MATCHED THEN INSERT (message_id, consumer_name) "
        "VALUES (s.message_id, s.consumer_name)"
    )
    assert str(statement) == str(statement.compile(dialect=oracle.dialect()))


def test_str_of_ordered_delete_is_mysql_sql() -> None:
    table = Inbox(sa.MetaData()).table
    cutoff = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    statement = DeleteOrderedLimit(table, table.c.received_at < cutoff, table.c.received_at, 10)
    assert str(statement) == (
        "DELETE FROM inbox_processed_messages "
        "WHERE inbox_processed_messages.received_at < %s "
        "ORDER BY inbox_processed_messages.received_at LIMIT 10"
    )
    assert str(statement) == str(statement.compile(dialect=mysql.dialect()))


def test_a_causal_select_is_set_statement_on_mariadb_only() -> None:
    table = Inbox(sa.MetaData()).table
    dialect = claim_dialect_for("mysql")
    mariadb = mysql.dialect(is_mariadb=True)  # type: ignore[no-untyped-call]
    conn = type("Conn", (), {"dialect": mariadb})()
    query = dialect.causal_select(conn, sa.literal(1)).select_from(table)  # type: ignore[arg-type]
    assert isinstance(query, CausalSelect)
    sql = " ".join(str(query.compile(dialect=mariadb)).split())
    assert sql == "SET STATEMENT wsrep_sync_wait = 1 FOR SELECT %s AS anon_1 FROM " + table.name
    plain = mysql.dialect()  # type: ignore[no-untyped-call]
    conn = type("Conn", (), {"dialect": plain})()
    query = dialect.causal_select(conn, sa.literal(1)).select_from(table)  # type: ignore[arg-type]
    assert not isinstance(query, CausalSelect)
    # A CausalSelect compiled for MySQL (no SET STATEMENT there) is the plain SELECT.
    assert str(CausalSelect(sa.literal(1)).compile(dialect=plain)) == str(
        sa.select(sa.literal(1)).compile(dialect=plain)
    )
