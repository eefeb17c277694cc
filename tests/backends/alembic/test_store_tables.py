"""The inbox store and the PostgreSQL partitioned table through the same Alembic operations.

Store: autogenerate → ``op.create_inbox_store_table`` → upgrade → key, unique constraint,
indexes → a receive is deduplicated → ``alembic check`` clean → downgrade leaves nothing, on
SQLite, PostgreSQL and MariaDB. Partitioned: PostgreSQL only; autogenerate ignores the
partitions made at run time, so ``alembic check`` stays clean after ``ensure_partitions``.
"""

from __future__ import annotations

import datetime
import io

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.migration import MigrationContext
from alembic.operations import Operations

from sa_inbox.exc import UnsupportedBackend
from sa_inbox.retention import RetentionPolicy
from sa_inbox.retention.partitions import ensure_partitions
from sa_inbox.store import InboxStore
from tests.support.alembic.inspection import count_rows
from tests.support.alembic.project import Project
from tests.unit.alembic.test_operations import _metadata_ddl, _offline, _statements, assert_same_ddl

DIALECTS = ("postgresql", "mysql", "mariadb", "oracle", "sqlite")
STORE_INDEXES = {
    "ix_inbox_store_claim": ["consumer_name", "status", "received_at"],
    "ix_inbox_store_aggregate": ["consumer_name", "aggregate_id", "status"],
    "ix_inbox_store_purge": ["status", "processed_at"],
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_store_create_emits_the_ddl_of_create_all(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.create_inbox_store_table(message_id_length=100)  # type: ignore[attr-defined]
    expected = _metadata_ddl(
        dialect, lambda m: InboxStore(m, message_id_length=100, consumers=False)
    )
    assert_same_ddl(_statements(buffer.getvalue()), expected)
    assert len([s for s in expected if s.startswith("CREATE INDEX")]) == 3


def test_partitioned_create_emits_the_ddl_of_create_all() -> None:
    from sa_inbox.retention.partitions import partitioned_processed_messages_table

    operations, buffer = _offline("postgresql")
    operations.create_partitioned_inbox_table(partition_key="sent_at")  # type: ignore[attr-defined]
    expected = _metadata_ddl(
        "postgresql", lambda m: partitioned_processed_messages_table(m, partition_key="sent_at")
    )
    assert_same_ddl(_statements(buffer.getvalue()), expected)
    assert expected[0].endswith("PARTITION BY RANGE (sent_at)")


@pytest.mark.parametrize("dialect", ["mysql", "sqlite", "oracle"])
def test_partitioned_table_is_refused_off_postgresql(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    with pytest.raises(UnsupportedBackend, match="only on postgresql"):
        operations.create_partitioned_inbox_table()  # type: ignore[attr-defined]
    assert buffer.getvalue() == ""


def test_partitioned_table_refuses_an_arrival_time_key() -> None:
    from sa_inbox.exc import InvalidArgument

    operations, buffer = _offline("postgresql")
    with pytest.raises(InvalidArgument, match="arrival time"):
        operations.create_partitioned_inbox_table(partition_key="received_at")  # type: ignore[attr-defined]
    assert buffer.getvalue() == ""


@pytest.mark.backend
def test_store_round_trip(project: Project) -> None:
    project.init()
    project.write_models("from sa_inbox.store import InboxStore\nstore = InboxStore(metadata)\n")
    text = project.autogenerate("add store")
    assert "op.create_inbox_store_table('inbox_store', message_id_length=255)" in text
    assert "op.drop_inbox_store_table('inbox_store', message_id_length=255)" in text
    assert "op.create_table(" not in text and "op.create_index(" not in text
    # the template's env.py adds the processed-messages table too ([sa_inbox] tables)
    assert "op.create_inbox_table('inbox_processed_messages', message_id_length=255)" in text

    command.upgrade(project.config(), "head")
    engine = project.engine()
    try:
        inspector = sa.inspect(engine)
        assert inspector.get_pk_constraint("inbox_store")["constrained_columns"] == ["id"]
        uniques = {
            tuple(u["column_names"]) for u in inspector.get_unique_constraints("inbox_store")
        }
        assert ("message_id", "consumer_name") in uniques
        indexes = {
            i["name"]: i["column_names"]
            for i in inspector.get_indexes("inbox_store")
            if i["name"] in STORE_INDEXES
        }
        assert set(indexes) == set(STORE_INDEXES)
        for name, columns in STORE_INDEXES.items():  # SQLite may list the rowid key last
            assert indexes[name][: len(columns)] == columns
        store = project.import_models().store
        with engine.begin() as conn:
            assert store.receive(conn, "m-1", {"amount": 5}) is True
            assert store.receive(conn, "m-1", {"amount": 5}) is False
        assert count_rows(engine, "inbox_store") == 1
    finally:
        engine.dispose()
    command.check(project.config())
    command.downgrade(project.config(), "base")
    assert project.table_names() == {"alembic_version"}


@pytest.mark.backend
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_partitioned_round_trip_ignores_runtime_partitions(project: Project) -> None:
    project.init()
    project.write_models(
        "from sa_inbox.retention.partitions import partitioned_processed_messages_table\n"
        "table = partitioned_processed_messages_table(metadata)\n"
    )
    text = project.autogenerate("add partitioned inbox")
    assert (
        "op.create_partitioned_inbox_table('inbox_processed_messages', "
        "message_id_length=255, partition_key='event_time')"
    ) in text
    assert "op.create_table(" not in text
    command.upgrade(project.config(), "head")
    models = project.import_models()
    engine = project.engine()
    try:
        policy = RetentionPolicy(
            max_redelivery=datetime.timedelta(days=2), max_replay=datetime.timedelta(0)
        )
        created = ensure_partitions(engine, models.table, policy=policy)
        assert len(created) >= 7  # the window and a week ahead, one partition a day
        names = set(sa.inspect(engine).get_table_names())
        assert len(names - {"alembic_version", "inbox_processed_messages"}) >= len(created)
    finally:
        engine.dispose()
    command.check(project.config())  # the partitions are not offered for dropping
    command.downgrade(project.config(), "base")
    assert project.table_names() == {"alembic_version"}  # partitions dropped with the parent


def test_typed_store_functions() -> None:
    from sa_inbox.alembic import create_inbox_store_table, drop_inbox_store_table

    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="sqlite", opts={"as_sql": True, "output_buffer": buffer}
    )
    operations = Operations(context)
    create_inbox_store_table(operations, "s1")
    drop_inbox_store_table(operations, "s1")
    statements = _statements(buffer.getvalue())
    assert statements[0].startswith("CREATE TABLE s1")
    assert statements[-1] == "DROP TABLE s1"
