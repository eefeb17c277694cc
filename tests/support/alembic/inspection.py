"""Assertions on the live schema: the inbox table's key, index and column lengths."""

from __future__ import annotations

import sqlalchemy as sa

TABLE = "inbox_processed_messages"


def assert_inbox_table(engine: sa.Engine, *, table: str = TABLE, length: int = 255) -> None:
    """The table exists with ``pk_<table>`` on (message_id, consumer_name) and its index."""
    inspector = sa.inspect(engine)
    assert table in inspector.get_table_names()
    pk = inspector.get_pk_constraint(table)
    assert pk["constrained_columns"] == ["message_id", "consumer_name"]
    if engine.dialect.name not in ("mysql", "mariadb"):  # MySQL names every primary key PRIMARY
        assert pk["name"] == f"pk_{table}"
    indexes = {
        index["name"]: index["column_names"]
        for index in inspector.get_indexes(table)
        if index["name"] != pk["name"]
    }
    assert indexes == {f"ix_{table}_received_at": ["received_at"]}
    columns = {column["name"]: column for column in inspector.get_columns(table)}
    assert list(columns) == [
        "message_id",
        "consumer_name",
        "received_at",
        "message_type",
        "correlation_id",
        "payload_hash",
    ]
    for name in ("message_id", "consumer_name"):
        assert getattr(columns[name]["type"], "length", None) == length
        assert columns[name]["nullable"] is False
    assert columns["received_at"]["nullable"] is False


def count_rows(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
