"""``op.refuse_inbox_table_drop(...)``: the line autogenerate writes instead of a drop it refused.

Where an sa-inbox table left the models and autogenerate could not pair it with exactly one
compatible new table to rename it to (:mod:`sa_inbox.alembic.pairing`), dropping it would
forget its rows (for the processed-messages table, every claimed message id). The revision
gets this operation, first in its upgrade, instead of the drop: the upgrade stops on it
with :class:`~sa_inbox.exc.InboxTableDropRefused` before anything has run, and its
message, also written as a comment above the line, says how to edit the revision.
"""

from __future__ import annotations

from alembic.operations import MigrateOperation, Operations

from ..exc import InboxTableDropRefused, InvalidArgument

__all__ = ["RefuseInboxTableDropOp"]


@Operations.register_operation("refuse_inbox_table_drop")
class RefuseInboxTableDropOp(MigrateOperation):
    """Stop the migration: ``table_name`` would be dropped with its rows.

    :param table_name: the table autogenerate did not drop.
    :param schema: its schema, or ``None``.
    :param reason: what autogenerate found and what to write instead (the error's message).
    :raises InvalidArgument: for a name or reason that is not a non-empty str.
    """

    def __init__(self, table_name: str, *, schema: str | None = None, reason: str) -> None:
        super().__init__()
        for name, value in (("table_name", table_name), ("reason", reason)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{name} must be a non-empty str, not {value!r}")
        self.table_name = table_name
        self.schema = schema
        self.reason = reason

    @classmethod
    def refuse_inbox_table_drop(
        cls,
        operations: Operations,
        table_name: str,
        *,
        schema: str | None = None,
        reason: str,
    ) -> None:
        """Raise :class:`~sa_inbox.exc.InboxTableDropRefused` with ``reason``.

        Online and offline alike, before any SQL of its own.
        """
        operations.invoke(cls(table_name, schema=schema, reason=reason))

    def reverse(self) -> RefuseInboxTableDropOp:
        """A refusal for the downgrade: it has to be written once the upgrade is."""
        return RefuseInboxTableDropOp(
            self.table_name,
            schema=self.schema,
            reason=f"the upgrade of this revision refuses to drop {self.table_name}: once it "
            f"is edited, write its reverse here, in place of this line.",
        )

    def to_diff_tuple(self) -> tuple[str, str | None, str, str]:
        """``("refuse_inbox_table_drop", schema, table_name, reason)``, for ``alembic check``."""
        return ("refuse_inbox_table_drop", self.schema, self.table_name, self.reason)

    def __repr__(self) -> str:
        return f"RefuseInboxTableDropOp({self.table_name!r}, schema={self.schema!r})"


@Operations.implementation_for(RefuseInboxTableDropOp)
def _refuse(operations: Operations, operation: RefuseInboxTableDropOp) -> None:
    raise InboxTableDropRefused(operation.reason)
