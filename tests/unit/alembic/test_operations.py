"""The sa-inbox Alembic operations without a database: DDL, reverse, rendering, bad input.

The DDL an operation emits (in offline mode, per dialect) must be exactly what
``metadata.create_all()`` / ``drop_all()`` emit for the same table.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import produce_migrations, render_op_text, render_python_code
from alembic.autogenerate.api import AutogenContext
from alembic.migration import MigrationContext
from alembic.operations import Operations, ops

import sa_inbox.alembic
from sa_inbox import Inbox, InboxError
from sa_inbox.alembic import (
    CreateInboxConsumersTableOp,
    CreateProcessedMessagesTableOp,
    DropProcessedMessagesTableOp,
    create_inbox_table,
    drop_inbox_table,
)
from sa_inbox.alembic.autogenerate import rewrite_inbox_tables
from sa_inbox.exc import InvalidArgument

DIALECTS = ("postgresql", "mysql", "mariadb", "oracle", "sqlite")


def _dialect(name: str) -> sa.Dialect:
    return sa.make_url(f"{name}://").get_dialect()()


def _statements(text: str) -> list[str]:
    """Offline output split into statements, without terminators (';', Oracle's '/')."""
    chunks = [chunk.strip() for chunk in text.split("\n\n")]
    return [chunk.rstrip(";").strip() for chunk in chunks if chunk and chunk != "/"]


def assert_same_ddl(emitted: list[str], expected: list[str]) -> None:
    """Same statements, CREATE TABLE first; create_all orders indexes as a set iterates."""
    assert emitted[:1] == expected[:1]
    assert sorted(emitted) == sorted(expected)
    indexes = [s for s in emitted if s.startswith("CREATE INDEX")]
    assert indexes == sorted(indexes)  # the operation emits them in name order


def _offline(name: str) -> tuple[Operations, io.StringIO]:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect=_dialect(name), opts={"as_sql": True, "output_buffer": buffer}
    )
    return Operations(context), buffer


def _metadata_ddl(name: str, build: Any, drop: bool = False) -> list[str]:
    statements: list[str] = []
    dialect = _dialect(name)

    def executor(sql: Any, *multiparams: Any, **params: Any) -> None:
        statements.append(str(sql.compile(dialect=dialect)).replace("\t", "    ").strip())

    engine = sa.create_mock_engine(f"{name}://", executor)
    metadata = sa.MetaData()
    build(metadata)
    (metadata.drop_all if drop else metadata.create_all)(engine, checkfirst=False)
    return statements


@pytest.mark.parametrize("dialect", DIALECTS)
def test_create_emits_the_ddl_of_create_all(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.create_inbox_table("billing_inbox", message_id_length=100)  # type: ignore[attr-defined]
    expected = _metadata_ddl(
        dialect,
        lambda m: Inbox(m, table_name="billing_inbox", message_id_length=100, consumers=False),
    )
    assert_same_ddl(_statements(buffer.getvalue()), expected)
    assert expected[0].startswith("CREATE TABLE billing_inbox")
    assert any(s.startswith("CREATE INDEX ix_billing_inbox_received_at") for s in expected)


@pytest.mark.parametrize("dialect", ["postgresql", "oracle"])
def test_create_in_a_schema(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.create_inbox_table(schema="audit")  # type: ignore[attr-defined]
    expected = _metadata_ddl(dialect, lambda m: Inbox(m, schema="audit", consumers=False))
    assert_same_ddl(_statements(buffer.getvalue()), expected)
    assert expected[0].startswith("CREATE TABLE audit.inbox_processed_messages")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_drop_emits_the_ddl_of_drop_all(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.drop_inbox_table()  # type: ignore[attr-defined]
    expected = _metadata_ddl(dialect, lambda m: Inbox(m, consumers=False), drop=True)
    assert _statements(buffer.getvalue()) == expected
    assert _statements(buffer.getvalue()) == ["DROP TABLE inbox_processed_messages"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_typed_functions_emit_what_the_registered_operations_emit(dialect: str) -> None:
    registered, registered_buffer = _offline(dialect)
    registered.create_inbox_table("t1", message_id_length=50)  # type: ignore[attr-defined]
    registered.drop_inbox_table("t1", message_id_length=50)  # type: ignore[attr-defined]
    typed, typed_buffer = _offline(dialect)
    create_inbox_table(typed, "t1", message_id_length=50)
    drop_inbox_table(typed, "t1", message_id_length=50)
    assert typed_buffer.getvalue() == registered_buffer.getvalue()
    assert len(_statements(typed_buffer.getvalue())) >= 3


def test_reverse_pairs_create_and_drop() -> None:
    create = CreateProcessedMessagesTableOp("t1", schema="s", message_id_length=80)
    drop = create.reverse()
    assert drop == DropProcessedMessagesTableOp("t1", schema="s", message_id_length=80)
    assert drop.reverse() == create
    assert create != CreateProcessedMessagesTableOp("t1", schema="s", message_id_length=81)


def test_render_adds_the_import_and_all_arguments() -> None:
    context = AutogenContext(MigrationContext.configure(dialect_name="sqlite"), autogenerate=False)
    create = CreateProcessedMessagesTableOp("t1", schema="audit", message_id_length=80)
    assert render_op_text(context, create) == (
        "op.create_inbox_table('t1', schema='audit', message_id_length=80)"
    )
    assert render_op_text(context, create.reverse()) == (
        "op.drop_inbox_table('t1', schema='audit', message_id_length=80)"
    )
    assert context.imports == {"import sa_inbox.alembic"}
    text = render_python_code(ops.UpgradeOps([create]))
    assert "op.create_inbox_table('t1', schema='audit', message_id_length=80)" in text


BAD_OPTIONS: list[dict[str, Any]] = [
    {"message_id_length": 0},
    {"message_id_length": -5},
    {"message_id_length": "255"},
    {"table_name": ""},
    {"table_name": None},
    {"schema": ""},
]


@pytest.mark.parametrize("options", BAD_OPTIONS)
def test_bad_options_raise_a_typed_error_before_any_sql(options: dict[str, Any]) -> None:
    operations, buffer = _offline("postgresql")
    with pytest.raises(InvalidArgument) as info:
        operations.create_inbox_table(**options)  # type: ignore[attr-defined]
    assert isinstance(info.value, InboxError) and isinstance(info.value, ValueError)
    with pytest.raises(InvalidArgument):
        create_inbox_table(operations, **options)
    assert buffer.getvalue() == ""


def test_unknown_option_is_a_type_error() -> None:
    operations, buffer = _offline("postgresql")
    with pytest.raises(TypeError):
        operations.create_inbox_table(length=5)  # type: ignore[attr-defined]
    assert buffer.getvalue() == ""


def _autogenerate(
    metadata: sa.MetaData, engine: sa.Engine | None = None
) -> tuple[AutogenContext, ops.UpgradeOps]:
    """Autogenerate against ``engine`` (default: an empty in-memory SQLite database)."""
    engine = engine or sa.create_engine("sqlite://")
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"target_metadata": metadata})
        script = produce_migrations(context, metadata)
        autogen = AutogenContext(context, metadata)
    assert script.upgrade_ops is not None
    return autogen, script.upgrade_ops


def test_comparator_replaces_create_table_and_its_index_and_is_idempotent() -> None:
    metadata = sa.MetaData()
    Inbox(metadata, message_id_length=120)
    sa.Table(
        "accounts", metadata, sa.Column("id", sa.Integer, primary_key=True), sa.Index("ix_a", "id")
    )
    autogen, upgrade_ops = _autogenerate(metadata)
    kinds = [type(op).__name__ for op in upgrade_ops.ops]
    assert sorted(kinds) == [
        "CreateInboxConsumersTableOp",
        "CreateProcessedMessagesTableOp",
        "CreateTableOp",
        "ModifyTableOps",
    ]
    (inbox_op,) = [op for op in upgrade_ops.ops if isinstance(op, CreateProcessedMessagesTableOp)]
    assert inbox_op == CreateProcessedMessagesTableOp(
        "inbox_processed_messages", message_id_length=120
    )
    (consumers_op,) = [op for op in upgrade_ops.ops if isinstance(op, CreateInboxConsumersTableOp)]
    assert consumers_op == CreateInboxConsumersTableOp("inbox_consumers", consumer_name_length=255)
    (modify,) = [op for op in upgrade_ops.ops if isinstance(op, ops.ModifyTableOps)]
    assert modify.table_name == "accounts"  # the business table keeps its CreateIndexOp
    before = list(upgrade_ops.ops)
    rewrite_inbox_tables(autogen, upgrade_ops, {None})
    assert upgrade_ops.ops == before


def test_importing_the_package_registers_the_operations() -> None:
    """Revision files say ``import sa_inbox.alembic``; that import alone registers the ops."""
    assert sa_inbox.alembic.autogenerate.IMPORT_LINE == "import sa_inbox.alembic"
    assert callable(Operations.create_inbox_table)  # type: ignore[attr-defined]
    assert callable(Operations.drop_inbox_table)  # type: ignore[attr-defined]
