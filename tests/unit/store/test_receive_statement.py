"""The receive's statement per dialect, compiled without a server (Oracle has none here):
the payload bound as JSON text, serialised once, and no implicit RETURNING."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle, postgresql, sqlite

from sa_inbox.dialects import claim_dialect_for
from sa_inbox.store import InboxStore
from sa_inbox.store.receive import _json, receive_insert
from sa_inbox.store.schema import JSONText, SerialisedJSON


def test_jsontext_binds_serialised_json_as_it_is() -> None:
    """Oracle's payload type: a SerialisedJSON is the text to store, not a string to encode."""
    dialect = oracle.dialect()
    text = _json({"a": [1, "\U0001f600"]})
    assert isinstance(text, SerialisedJSON)
    assert JSONText().process_bind_param(text, dialect) == '{"a": [1, "\\ud83d\\ude00"]}'
    assert JSONText().process_bind_param({"a": 1}, dialect) == '{"a": 1}'  # other values


def test_the_receive_statement_per_dialect() -> None:
    table = InboxStore(sa.MetaData()).table
    expected = {
        "postgresql": (postgresql.dialect(), "CAST(%(payload)s::VARCHAR AS JSON)"),
        "mysql": (mysql.dialect(), "VALUES (%s, 'pending', 0)"),
        "sqlite": (sqlite.dialect(), "?"),
    }
    for name, (dialect, payload) in expected.items():
        statement = receive_insert(claim_dialect_for(name, "native"), table)
        sql = str(statement.compile(dialect=dialect))
        assert payload in sql and "'pending'" in sql and "RETURNING" not in sql, sql
    merge = receive_insert(claim_dialect_for("oracle", "native"), table)
    assert "MERGE INTO" in str(merge.compile(dialect=oracle.dialect()))
