"""``op.rename_inbox_consumer(table, old, new)``: a consumer renamed with its claims.

A claim is keyed by ``(message_id, consumer_name)``, so a consumer that starts under a new
``consumer_name`` finds none of the ids it claimed under the old one: every redelivery
within the retention window would be applied again. This operation copies the old name's
claims under the new name, in the migration's transaction::

    INSERT INTO t (message_id, consumer_name, received_at, ...)
    SELECT src.message_id, 'new', src.received_at, ... FROM t AS src
    WHERE src.consumer_name = 'old' AND NOT EXISTS (
        SELECT dst.message_id FROM t AS dst
        WHERE dst.message_id = src.message_id AND dst.consumer_name = 'new')

``received_at`` is copied, so the copies leave with the retention purge when the originals
would; the table holds exactly the retention window's claims, so that is what is copied.
The old name's rows stay (an instance still running under it keeps its duplicates). The
reverse copies the new name's claims back under the old one, so a downgrade forgets none
claimed in between either. Run it while no consumer claims under the new name yet (before
the deploy that renames it), and stop the old name's consumers first: a claim made under
the old name after the copy is not copied.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations

from ..exc import InvalidArgument
from ..schema import DEFAULT_MESSAGE_ID_LENGTH
from ..validation import validate_key
from .operations import PROCESSED_MESSAGES, Invoker
from .tables import build_table

__all__ = ["RenameInboxConsumerOp", "copy_claims", "rename_inbox_consumer"]


def copy_claims(table: sa.Table, old: str, new: str) -> sa.Insert:
    """``INSERT … SELECT`` of ``old``'s claims in ``table`` under ``new``, skipping those
    ``new`` already has (see the module); every column of ``table`` is copied."""
    src, dst = table.alias("src"), table.alias("dst")
    names = [column.name for column in table.columns]
    renamed = sa.literal(new, type_=table.c.consumer_name.type).label("consumer_name")
    values = [renamed if name == "consumer_name" else src.c[name] for name in names]
    already = sa.select(dst.c.message_id).where(
        dst.c.message_id == src.c.message_id, dst.c.consumer_name == new
    )
    rows = sa.select(*values).where(src.c.consumer_name == old, ~sa.exists(already))
    return sa.insert(table).from_select(names, rows)


@Operations.register_operation("rename_inbox_consumer")
class RenameInboxConsumerOp(MigrateOperation):
    """Copy the claims of ``old_consumer_name`` under ``new_consumer_name``.

    :param table_name: the processed-messages table (as ``op.create_inbox_table`` makes it).
    :param old_consumer_name: the name the consumer claimed under so far.
    :param new_consumer_name: the name it claims under from now on.
    :param schema: the table's schema, or ``None`` for the connection's default.
    :param message_id_length: the table's length of ``consumer_name``, in characters.
    :raises sa_inbox.exc.InvalidMessageId: for a consumer name a claim would refuse, before SQL.
    :raises InvalidArgument: for a bad table name or length, or the same name twice.
    """

    def __init__(
        self,
        table_name: str,
        old_consumer_name: str,
        new_consumer_name: str,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        super().__init__()
        self.table_name = table_name
        self.schema = schema
        self.message_id_length = message_id_length
        self.to_table()  # validate now, not in SQL
        for field, value in (("old", old_consumer_name), ("new", new_consumer_name)):
            validate_key(value, f"{field} consumer_name", message_id_length)
        if old_consumer_name == new_consumer_name:
            raise InvalidArgument(
                f"rename_inbox_consumer: old and new consumer_name are both {old_consumer_name!r}"
            )
        self.old_consumer_name = old_consumer_name
        self.new_consumer_name = new_consumer_name

    def to_table(self) -> sa.Table:
        """The processed-messages table the claims are copied in."""
        options = {"message_id_length": self.message_id_length}
        return build_table(PROCESSED_MESSAGES, self.table_name, self.schema, options)

    @classmethod
    def rename_inbox_consumer(
        cls,
        operations: Operations,
        table_name: str,
        old_consumer_name: str,
        new_consumer_name: str,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        """Copy ``old_consumer_name``'s claims in ``table_name`` under ``new_consumer_name``.

        See :mod:`sa_inbox.alembic.consumer` for the SQL and when to run it; the downgrade
        (``op.rename_inbox_consumer(table_name, new, old)``) copies them back.

        :raises sa_inbox.exc.InvalidMessageId: for a bad consumer name, before SQL.
        :raises sa_inbox.exc.InvalidArgument: for a bad table name or length, or the
            same name twice, before SQL.
        """
        operations.invoke(
            cls(
                table_name,
                old_consumer_name,
                new_consumer_name,
                schema=schema,
                message_id_length=message_id_length,
            )
        )

    def reverse(self) -> RenameInboxConsumerOp:
        return RenameInboxConsumerOp(
            self.table_name,
            self.new_consumer_name,
            self.old_consumer_name,
            schema=self.schema,
            message_id_length=self.message_id_length,
        )

    def __repr__(self) -> str:
        return (
            f"RenameInboxConsumerOp({self.table_name!r}, {self.old_consumer_name!r}, "
            f"{self.new_consumer_name!r}, schema={self.schema!r})"
        )


@Operations.implementation_for(RenameInboxConsumerOp)
def _copy(operations: Operations, operation: RenameInboxConsumerOp) -> None:
    statement = copy_claims(
        operation.to_table(), operation.old_consumer_name, operation.new_consumer_name
    )
    operations.execute(statement)


def rename_inbox_consumer(
    op: Invoker,
    table_name: str,
    old_consumer_name: str,
    new_consumer_name: str,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.rename_inbox_consumer(...)``; ``op`` is ``alembic.op``."""
    op.invoke(
        RenameInboxConsumerOp(
            table_name,
            old_consumer_name,
            new_consumer_name,
            schema=schema,
            message_id_length=message_id_length,
        )
    )
