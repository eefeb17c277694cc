"""Renames and refused drops without a database: the SQL per dialect, rendering, pairing.

The statements of ``op.rename_inbox_table`` and friends per dialect (offline), their
reverse, bad input refused before any SQL, ``op.refuse_inbox_table_drop`` stopping a
migration, and :func:`sa_inbox.alembic.pairing.resolve_drops` on each case it decides.
The live round trips are in ``tests/backends/alembic/test_rename_table.py``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import render_op_text
from alembic.autogenerate.api import AutogenContext
from alembic.migration import MigrationContext
from alembic.operations import ops

from sa_inbox import ConfigurationError, Inbox
from sa_inbox.alembic import (
    CreatePartitionedInboxTableOp,
    CreateProcessedMessagesTableOp,
    DropProcessedMessagesTableOp,
    RefuseInboxTableDropOp,
    RenameInboxStoreTableOp,
    RenameProcessedMessagesTableOp,
    rename_inbox_store_table,
    rename_inbox_table,
    rename_outbox_table,
)
from sa_inbox.alembic.pairing import resolve_drops
from sa_inbox.exc import InboxTableDropRefused, InvalidArgument, UnsupportedBackend
from tests.unit.alembic.test_operations import _autogenerate, _offline, _statements

RENAMED = {
    "postgresql": [
        "ALTER TABLE seen RENAME TO order_inbox",
        "ALTER INDEX ix_seen_received_at RENAME TO ix_order_inbox_received_at",
        "ALTER TABLE order_inbox RENAME CONSTRAINT pk_seen TO pk_order_inbox",
    ],
    "mysql": [
        "ALTER TABLE seen RENAME TO order_inbox",
        "ALTER TABLE order_inbox RENAME INDEX ix_seen_received_at TO ix_order_inbox_received_at",
    ],
    "oracle": [
        "ALTER TABLE seen RENAME TO order_inbox",
        "ALTER INDEX ix_seen_received_at RENAME TO ix_order_inbox_received_at",
        "ALTER TABLE order_inbox RENAME CONSTRAINT pk_seen TO pk_order_inbox",
        "ALTER INDEX pk_seen RENAME TO pk_order_inbox",
    ],
}
RENAMED["mariadb"] = RENAMED["mysql"]
#: The owners of the table's consumer names move with it (printed offline, where the
#: consumers table cannot be looked for).
MOVED_OWNERS = (
    "UPDATE inbox_consumers SET inbox_table='order_inbox' "
    "WHERE inbox_consumers.inbox_table = 'seen'"
)


@pytest.mark.parametrize("dialect", sorted(RENAMED))
def test_rename_renames_the_table_and_the_names_derived_from_it(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.rename_inbox_table("seen", "order_inbox", message_id_length=80)  # type: ignore[attr-defined]
    assert _statements(buffer.getvalue()) == [*RENAMED[dialect], MOVED_OWNERS]


def test_rename_on_sqlite_copies_the_rows_into_the_new_table() -> None:
    """SQLite keeps constraint names inside CREATE TABLE and cannot rename an index."""
    operations, buffer = _offline("sqlite")
    operations.rename_inbox_table("seen", "order_inbox", message_id_length=80)  # type: ignore[attr-defined]
    statements = _statements(buffer.getvalue())
    assert statements[0].startswith("CREATE TABLE order_inbox")
    assert "CONSTRAINT pk_order_inbox PRIMARY KEY (message_id, consumer_name)" in statements[0]
    assert "VARCHAR(80)" in statements[0]
    assert statements[1] == ("CREATE INDEX ix_order_inbox_received_at ON order_inbox (received_at)")
    columns = "message_id, consumer_name, received_at, message_type, correlation_id, payload_hash"
    assert statements[2].startswith(f"INSERT INTO order_inbox ({columns}) SELECT seen.message_id")
    assert statements[2].endswith("FROM seen")
    assert statements[3:] == ["DROP TABLE seen", MOVED_OWNERS]


STORE_RENAMED = {
    "postgresql": [
        "ALTER TABLE audit.s1 RENAME TO s2",
        "ALTER TABLE audit.s2 RENAME CONSTRAINT ck_s1_status TO ck_s2_status",
        "ALTER INDEX audit.ix_s1_aggregate RENAME TO ix_s2_aggregate",
        "ALTER INDEX audit.ix_s1_claim RENAME TO ix_s2_claim",
        "ALTER INDEX audit.ix_s1_purge RENAME TO ix_s2_purge",
        "ALTER TABLE audit.s2 RENAME CONSTRAINT uq_s1_message TO uq_s2_message",
    ],
    # MariaDB cannot rename a CHECK constraint: dropped, added under the new name
    "mariadb": [
        "ALTER TABLE audit.s1 RENAME TO audit.s2",
        "ALTER TABLE audit.s2 DROP CONSTRAINT ck_s1_status",
        "ALTER TABLE audit.s2 ADD CONSTRAINT ck_s2_status "
        "CHECK (status IN ('pending', 'processing', 'done', 'dead'))",
        "ALTER TABLE audit.s2 RENAME INDEX ix_s1_aggregate TO ix_s2_aggregate",
        "ALTER TABLE audit.s2 RENAME INDEX ix_s1_claim TO ix_s2_claim",
        "ALTER TABLE audit.s2 RENAME INDEX ix_s1_purge TO ix_s2_purge",
        "ALTER TABLE audit.s2 RENAME INDEX uq_s1_message TO uq_s2_message",
    ],
}


@pytest.mark.parametrize("dialect", sorted(STORE_RENAMED))
def test_store_rename_in_a_schema(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.rename_inbox_store_table("s1", "s2", schema="audit")  # type: ignore[attr-defined]
    moved = (
        "UPDATE audit.inbox_consumers SET inbox_table='s2' "
        "WHERE audit.inbox_consumers.inbox_table = 's1'"
    )
    assert _statements(buffer.getvalue()) == [*STORE_RENAMED[dialect], moved]


def test_reverse_renames_back() -> None:
    rename = RenameProcessedMessagesTableOp("a", "b", schema="s", message_id_length=80)
    assert rename.reverse() == RenameProcessedMessagesTableOp(
        "b", "a", schema="s", message_id_length=80
    )
    assert rename.reverse().reverse() == rename
    assert rename != RenameInboxStoreTableOp("a", "b", schema="s", message_id_length=80)


@pytest.mark.parametrize("dialect", ["postgresql", "mysql", "sqlite", "oracle"])
def test_typed_functions_emit_what_the_registered_operations_emit(dialect: str) -> None:
    registered, registered_buffer = _offline(dialect)
    registered.rename_inbox_table("a", "b")  # type: ignore[attr-defined]
    registered.rename_inbox_store_table("c", "d")  # type: ignore[attr-defined]
    registered.rename_outbox_table("e", "f")  # type: ignore[attr-defined]
    typed, typed_buffer = _offline(dialect)
    rename_inbox_table(typed, "a", "b")
    rename_inbox_store_table(typed, "c", "d")
    rename_outbox_table(typed, "e", "f")
    assert typed_buffer.getvalue() == registered_buffer.getvalue()


BAD_RENAMES: list[tuple[tuple[Any, ...], dict[str, Any], str]] = [
    (("seen", "seen"), {}, "old and new name are both 'seen'"),
    (("", "b"), {}, "table_name must be a non-empty str"),
    (("a", None), {}, "table_name must be a non-empty str"),
    (("a", "b"), {"message_id_length": 0}, "message_id_length"),
    (("a", "b"), {"schema": ""}, "schema must be None or a non-empty str"),
]


@pytest.mark.parametrize(("args", "options", "message"), BAD_RENAMES)
def test_bad_rename_raises_a_typed_error_before_any_sql(
    args: tuple[Any, ...], options: dict[str, Any], message: str
) -> None:
    operations, buffer = _offline("postgresql")
    with pytest.raises(InvalidArgument, match=message):
        operations.rename_inbox_table(*args, **options)  # type: ignore[attr-defined]
    assert buffer.getvalue() == ""


def test_rename_on_a_backend_without_one_is_refused_before_any_sql() -> None:
    operations, buffer = _offline("mssql")
    with pytest.raises(UnsupportedBackend, match=r"rename_inbox_table: .* not on mssql"):
        operations.rename_inbox_table("a", "b")  # type: ignore[attr-defined]
    assert buffer.getvalue() == ""


def _context() -> AutogenContext:
    return AutogenContext(MigrationContext.configure(dialect_name="sqlite"), autogenerate=False)


def test_render_writes_a_comment_then_the_rename() -> None:
    context = _context()
    rename = RenameProcessedMessagesTableOp("a", "b", schema="audit", message_id_length=80)
    assert render_op_text(context, rename) == (
        "# sa-inbox: a renamed to b, in place of a drop + create, which would lose the message\n"
        "# ids claimed in it.\n"
        "op.rename_inbox_table('a', 'b', schema='audit', message_id_length=80)"
    )
    assert context.imports == {"import sa_inbox.alembic"}


def test_refusal_stops_the_migration_before_any_sql() -> None:
    operations, buffer = _offline("postgresql")
    with pytest.raises(InboxTableDropRefused, match=r"^drop it yourself$") as info:
        operations.refuse_inbox_table_drop("seen", reason="drop it yourself")  # type: ignore[attr-defined]
    assert isinstance(info.value, ConfigurationError)
    assert buffer.getvalue() == ""
    with pytest.raises(InvalidArgument, match="reason must be a non-empty str"):
        RefuseInboxTableDropOp("seen", reason="")


def test_render_of_a_refusal_is_valid_python_with_the_reason_twice() -> None:
    reason = "refused to drop seen: " + "a long reason, " * 12 + "the end."
    text = render_op_text(_context(), RefuseInboxTableDropOp("seen", reason=reason))
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert " ".join(line[2:] for line in comments) == "sa-inbox: " + reason
    assert max(len(line) for line in text.splitlines()) <= 88
    calls: list[tuple[Any, ...]] = []

    class Op:
        def refuse_inbox_table_drop(self, *args: Any, **kw: Any) -> None:
            calls.append((args, kw))

    exec(text, {"op": Op()})
    assert calls == [(("seen",), {"reason": reason})]


# -- pairing ------------------------------------------------------------------------------


def _create(name: str, **options: Any) -> CreateProcessedMessagesTableOp:
    """As autogenerate makes it: with every factory option."""
    return CreateProcessedMessagesTableOp(name, **{"message_id_length": 255, **options})


def _drop(name: str, **options: Any) -> DropProcessedMessagesTableOp:
    return DropProcessedMessagesTableOp(name, **{"message_id_length": 255, **options})


def _refusal(result: list[ops.MigrateOperation]) -> RefuseInboxTableDropOp:
    assert isinstance(result[0], RefuseInboxTableDropOp)
    return result[0]


def test_one_drop_and_one_create_of_a_kind_are_a_rename() -> None:
    accounts = ops.CreateTableOp("accounts", [sa.Column("id", sa.Integer, primary_key=True)])
    result = resolve_drops([_create("b"), accounts, _drop("a")])
    assert result == [RenameProcessedMessagesTableOp("a", "b", message_id_length=255), accounts]
    assert resolve_drops(list(result)) == result  # idempotent


def test_a_rename_to_another_length_keeps_the_tables_own_and_notes_it() -> None:
    (rename,) = resolve_drops([_create("b", message_id_length=100), _drop("a")])
    assert rename == RenameProcessedMessagesTableOp("a", "b", message_id_length=255)
    assert isinstance(rename, RenameProcessedMessagesTableOp)
    assert "message_id_length 255 -> 100" in rename.notes[0]


MISMATCHED = {
    "another kind": (
        [CreatePartitionedInboxTableOp("b", message_id_length=255), _drop("a")],
        "a is a processed_messages table and b a partitioned_processed_messages table",
    ),
    "another schema": (
        [_create("b", schema="audit"), _drop("a")],
        "a and audit.b are in different schemas",
    ),
    "two new tables": (
        [_create("b"), _create("c"), _drop("a")],
        "a left the models while b, c came in",
    ),
    "two old tables": (
        [_create("c"), _drop("a"), _drop("b")],
        "a, b left the models while c came in",
    ),
}


@pytest.mark.parametrize("case", list(MISMATCHED))
def test_a_drop_that_is_not_one_rename_is_refused_first(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    operations, why = MISMATCHED[case]
    creates = [op for op in operations if not isinstance(op, DropProcessedMessagesTableOp)]
    with caplog.at_level(logging.WARNING, "sa_inbox.alembic"):
        result = resolve_drops(list(operations))
    refusals = [op for op in result if isinstance(op, RefuseInboxTableDropOp)]
    assert result == refusals + creates  # no drop left; refusals first
    assert all(why in refusal.reason for refusal in refusals)
    renames = "op.rename_inbox_table(" in refusals[0].reason
    assert renames is (case in ("two new tables", "two old tables"))  # suggested if it can be
    assert f"op.drop_inbox_table('{refusals[0].table_name}', message_id_length=255)" in (
        refusals[0].reason
    )
    assert [record.levelno for record in caplog.records] == [logging.WARNING] * len(refusals)
    assert resolve_drops(list(result)) == result


def test_a_lone_drop_stays_with_a_comment_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    drop = _drop("a")
    with caplog.at_level(logging.WARNING, "sa_inbox.alembic"):
        assert resolve_drops([drop]) == [drop]
        assert resolve_drops([drop]) == [drop]  # a second run warns no more
    assert len(caplog.records) == 1
    assert drop.notes == [
        "Drops a and the message ids claimed in it (every redelivery of them within the "
        "retention window would be applied again): the models no longer have it (if they "
        "do, they are missing from env.py's target_metadata)."
    ]
    assert caplog.records[0].levelno == logging.WARNING
    assert render_op_text(_context(), drop).splitlines()[0] == (
        "# sa-inbox: Drops a and the message ids claimed in it (every redelivery of them within"
    )


def test_a_lookalike_table_dropped_for_a_new_inbox_is_refused() -> None:
    """A table with message_id and consumer_name that is not exactly an sa-inbox one."""
    engine = sa.create_engine("sqlite://")
    legacy = sa.MetaData()
    sa.Table(
        "legacy_seen",
        legacy,
        sa.Column("message_id", sa.String(100), primary_key=True),
        sa.Column("consumer_name", sa.String(100), primary_key=True),
        sa.Column("seen_at", sa.DateTime),
        sa.Index("ix_legacy_seen_at", "seen_at"),
    )
    legacy.create_all(engine)
    metadata = sa.MetaData()
    Inbox(metadata, table_name="order_inbox")
    _, upgrade_ops = _autogenerate(metadata, engine)
    refusal = _refusal(upgrade_ops.ops)
    assert refusal.table_name == "legacy_seen"
    assert "has message_id and consumer_name columns but is not exactly" in refusal.reason
    assert "write op.drop_table('legacy_seen') here instead" in refusal.reason
    assert [type(op).__name__ for op in upgrade_ops.ops] == [
        "RefuseInboxTableDropOp",
        "CreateInboxConsumersTableOp",  # its own kind: never paired with either table
        "CreateProcessedMessagesTableOp",
    ]  # neither its drop_table nor the drop_index of its index


def test_every_operation_reports_its_diff_for_alembic_check() -> None:
    """``alembic check`` lists ``upgrade_ops.as_diffs()``: each op must give a diff tuple."""
    create, drop = _create("b", schema="s"), _drop("a", schema="s")
    rename = RenameProcessedMessagesTableOp("a", "b", schema="s")
    refusal = RefuseInboxTableDropOp("a", schema="s", reason="why")
    diffs = ops.UpgradeOps([create, drop, rename, refusal]).as_diffs()
    assert [diff[0] for diff in diffs] == [
        "add_table",
        "remove_table",
        "rename_table",
        "refuse_inbox_table_drop",
    ]
    assert (diffs[0][1].fullname, diffs[1][1].fullname) == ("s.b", "s.a")
    assert diffs[2:] == [
        ("rename_table", "s", "a", "b"),
        ("refuse_inbox_table_drop", "s", "a", "why"),
    ]
