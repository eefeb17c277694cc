"""``op.rename_inbox_consumer`` without a database: its SQL per dialect, reverse, bad input.

Offline with ``literal_binds`` (as the template's env.py runs ``--sql``): one
``INSERT … SELECT`` that copies the old name's claims under the new one and skips those the
new name has. The live runs are in ``tests/backends/alembic/test_rename_consumer.py``.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from alembic.migration import MigrationContext
from alembic.operations import Operations

from sa_inbox.alembic import RenameInboxConsumerOp, rename_inbox_consumer
from sa_inbox.exc import InvalidArgument, InvalidMessageId
from tests.unit.alembic.test_operations import DIALECTS, _dialect, _statements

COLUMNS = "message_id, consumer_name, received_at, message_type, correlation_id, payload_hash"


def _literal_offline(name: str) -> tuple[Operations, io.StringIO]:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect=_dialect(name),
        opts={"as_sql": True, "output_buffer": buffer, "literal_binds": True},
    )
    return Operations(context), buffer


@pytest.mark.parametrize("dialect", DIALECTS)
def test_copies_the_claims_under_the_new_name_skipping_those_it_has(dialect: str) -> None:
    operations, buffer = _literal_offline(dialect)
    operations.rename_inbox_consumer("seen", "billing", "o'brien")  # type: ignore[attr-defined]
    (statement,) = _statements(buffer.getvalue())
    alias = " " if dialect == "oracle" else " AS "  # Oracle has no AS before a table alias
    assert " ".join(statement.split()) == (
        f"INSERT INTO seen ({COLUMNS}) SELECT src.message_id, 'o''brien' AS consumer_name, "
        "src.received_at, src.message_type, src.correlation_id, src.payload_hash "
        f"FROM seen{alias}src WHERE src.consumer_name = 'billing' AND NOT (EXISTS "
        f"(SELECT dst.message_id FROM seen{alias}dst WHERE dst.message_id = src.message_id "
        "AND dst.consumer_name = 'o''brien'))"
    )


def test_reverse_copies_back() -> None:
    op = RenameInboxConsumerOp("seen", "a", "b", schema="s", message_id_length=10)
    back = op.reverse()
    assert (back.table_name, back.old_consumer_name, back.new_consumer_name) == ("seen", "b", "a")
    assert (back.schema, back.message_id_length) == ("s", 10)


def test_typed_function_emits_what_the_registered_operation_emits() -> None:
    registered, registered_buffer = _literal_offline("postgresql")
    registered.rename_inbox_consumer("seen", "a", "b", schema="audit")  # type: ignore[attr-defined]
    typed, typed_buffer = _literal_offline("postgresql")
    rename_inbox_consumer(typed, "seen", "a", "b", schema="audit")
    assert typed_buffer.getvalue() == registered_buffer.getvalue()
    assert "INSERT INTO audit.seen" in typed_buffer.getvalue()


BAD: list[tuple[tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    (("seen", "a", "a"), {}, InvalidArgument, "old and new consumer_name are both 'a'"),
    (("seen", "", "b"), {}, InvalidMessageId, "old consumer_name must not be empty"),
    (("seen", "a", " b"), {}, InvalidMessageId, "leading or trailing whitespace"),
    (("seen", "a", None), {}, InvalidMessageId, "new consumer_name must not be None"),
    (("seen", "a", "b" * 11), {"message_id_length": 10}, InvalidMessageId, "holds 10"),
    (("", "a", "b"), {}, InvalidArgument, "table_name must be a non-empty str"),
    (("seen", "a", "b"), {"message_id_length": 0}, InvalidArgument, "message_id_length"),
]


@pytest.mark.parametrize(("args", "options", "error", "message"), BAD)
def test_bad_input_raises_a_typed_error_before_any_sql(
    args: tuple[Any, ...], options: dict[str, Any], error: type[Exception], message: str
) -> None:
    operations, buffer = _literal_offline("postgresql")
    with pytest.raises(error, match=message) as info:
        operations.rename_inbox_consumer(*args, **options)  # type: ignore[attr-defined]
    assert isinstance(info.value, ValueError)
    assert buffer.getvalue() == ""
