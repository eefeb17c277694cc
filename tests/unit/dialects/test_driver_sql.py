"""``DriverSQL``: a single-row statement compiled once per dialect, sent as driver SQL.

The text is SQLAlchemy's own compilation for the dialect; the parameters are the row's
values in the paramstyle's order (or by name), through each column type's bind processor;
statements whose parameters SQLAlchemy renders at execution keep the compiled path. The
values written are checked on a real SQLite file against ``Connection.execute()`` of the
same statement (the backend tests run it on PostgreSQL and MariaDB).
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.mysql import aiomysql, pymysql
from sqlalchemy.dialects.postgresql import asyncpg, psycopg
from sqlalchemy.dialects.sqlite import pysqlite
from sqlalchemy.engine import Dialect

from sa_inbox.dialects import backend_for
from sa_inbox.dialects.base import EXECUTION_OPTIONS
from sa_inbox.dialects.driver_sql import DriverSQL
from sa_inbox.store import InboxStore
from sa_inbox.store.schema import RECEIVE_COLUMNS, SerialisedJSON, UTCDateTime
from sa_inbox.store.store import receive_insert

DIALECTS = [asyncpg.dialect(), psycopg.dialect(), aiomysql.dialect(), pymysql.dialect()]
DIALECTS.append(pysqlite.dialect())
WHEN = datetime.datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC)


def _row(message_id: str) -> dict[str, object]:
    return {
        "message_id": message_id,
        "consumer_name": "billing",
        "aggregate_id": None,
        "message_type": "t",
        "payload": SerialisedJSON('{"n": 1}'),
        "status": "pending",
        "received_at": WHEN,
        "available_at": WHEN,
        "attempts": 0,
    }


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: type(d).__name__)
def test_the_text_is_sqlalchemys_compilation_in_the_paramstyles_order(dialect: Dialect) -> None:
    table = InboxStore(sa.MetaData()).table
    statement = receive_insert(backend_for(dialect.name).claim, table)
    driver = DriverSQL.build(statement, dialect, RECEIVE_COLUMNS)
    compiled = statement.compile(dialect=dialect, column_keys=list(RECEIVE_COLUMNS))
    assert driver is not None and driver.sql == compiled.string
    keys = [key for key, _ in driver.params]
    if compiled.positional:
        assert driver.names is None and keys == list(compiled.positiontup or ())
    else:
        assert driver.names == tuple(compiled.binds) and keys == list(driver.names)
    # status and attempts are literals in the text: never bound.
    assert "status" not in keys and "attempts" not in keys


def test_statements_rendered_at_execution_keep_the_compiled_path() -> None:
    t = sa.table("t", sa.column("a"), sa.column("b"))
    expanding = sa.insert(t).from_select(
        ["a"], sa.select(t.c.a).where(t.c.b.in_(sa.bindparam("bs", expanding=True)))
    )
    unbound = sa.insert(t).values(a=sa.bindparam("a"), b=sa.bindparam("not_a_key"))
    for statement in (expanding, unbound):
        assert DriverSQL.build(statement, pysqlite.dialect(), ["a"]) is None


def test_a_constant_parameter_is_bound_processed() -> None:
    t = sa.table("t", sa.column("a"), sa.column("at", UTCDateTime()))
    statement = sa.insert(t).values(at=sa.bindparam("at_", value=WHEN, type_=UTCDateTime()))
    driver = DriverSQL.build(statement, pymysql.dialect(), ["a"])
    assert driver is not None
    assert driver.params[-1] == (None, WHEN.replace(tzinfo=None))  # naive UTC on MySQL


def test_it_writes_what_the_compiled_statement_writes(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'driver.db'}")
    store = InboxStore(sa.MetaData())
    store.table.metadata.create_all(engine)
    statement = receive_insert(backend_for("sqlite").claim, store.table)
    driver = DriverSQL.build(statement, engine.dialect, RECEIVE_COLUMNS)
    assert driver is not None
    with engine.begin() as conn:
        assert DriverSQL.runs_on(conn)
        assert driver.execute(conn, _row("driver"), EXECUTION_OPTIONS).rowcount == 1
        assert driver.execute(conn, _row("driver"), EXECUTION_OPTIONS).rowcount == 0
        conn.execute(statement, _row("compiled"), execution_options=EXECUTION_OPTIONS)
    columns = [c for c in store.table.c if c.name not in ("id", "message_id")]
    with engine.connect() as conn:
        rows = conn.execute(sa.select(store.table.c.message_id, *columns)).mappings().all()
    by_id = {row["message_id"]: {c.name: row[c.name] for c in columns} for row in rows}
    assert by_id["driver"] == by_id["compiled"]
    assert by_id["driver"]["received_at"] == WHEN and by_id["driver"]["payload"] == {"n": 1}
    engine.dispose()


def test_a_schema_translate_map_keeps_the_compiled_path(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'map.db'}")
    with engine.connect() as conn:
        assert DriverSQL.runs_on(conn)
        translated = conn.execution_options(schema_translate_map={None: "other"})
        assert not DriverSQL.runs_on(translated)
    engine.dispose()
