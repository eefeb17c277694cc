"""Alembic operations for the sa-inbox tables: ``op.create_inbox_table()`` and friends.

Each table kind gets a pair of :class:`~alembic.operations.MigrateOperation` classes
registered on :class:`~alembic.operations.Operations`; the pair shares one generic
implementation (build the table with the kind's factory, then let Alembic's DDL layer emit
``CREATE TABLE`` + ``CREATE INDEX`` or ``DROP TABLE``), so the DDL is exactly what
``metadata.create_all()`` emits, on every dialect and in offline (``--sql``) mode too.
Each operation has a :meth:`~CreateInboxTableOp.reverse`, so autogenerate renders both the
upgrade and the downgrade.

Registered operations are untyped (``op`` is a proxy); the plain functions
:func:`create_inbox_table` and :func:`drop_inbox_table` are the typed spelling::

    from alembic import op
    from sa_inbox.alembic import create_inbox_table

    def upgrade() -> None:
        create_inbox_table(op, message_id_length=255)   # same as op.create_inbox_table()
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations

from ..schema import DEFAULT_MESSAGE_ID_LENGTH, DEFAULT_TABLE_NAME, processed_messages_table
from .tables import InboxTableKind, build_table, register_kind

__all__ = [
    "PROCESSED_MESSAGES",
    "CreateInboxTableOp",
    "CreateProcessedMessagesTableOp",
    "DropInboxTableOp",
    "DropProcessedMessagesTableOp",
    "Invoker",
    "create_inbox_table",
    "drop_inbox_table",
]


class Invoker(Protocol):
    """Anything that runs a migration operation: an :class:`Operations` or ``alembic.op``."""

    def invoke(self, operation: MigrateOperation) -> Any: ...


class _InboxTableOp(MigrateOperation):
    """An sa-inbox table, named and configured; subclasses fix :attr:`kind`."""

    kind: ClassVar[InboxTableKind]

    def __init__(self, table_name: str, *, schema: str | None = None, **options: Any) -> None:
        super().__init__()
        self.table_name = table_name
        self.schema = schema
        self.options = dict(options)
        build_table(self.kind, table_name, schema, self.options)  # validate now, not in DDL

    def to_table(self, metadata: sa.MetaData | None = None) -> sa.Table:
        """The table this operation creates or drops, built by the kind's factory."""
        return build_table(self.kind, self.table_name, self.schema, self.options, metadata)

    def __repr__(self) -> str:
        options = "".join(f", {key}={value!r}" for key, value in sorted(self.options.items()))
        return f"{type(self).__name__}({self.table_name!r}, schema={self.schema!r}{options})"

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, _InboxTableOp)
            and (other.table_name, other.schema, other.options)
            == (self.table_name, self.schema, self.options)
        )

    __hash__ = None  # type: ignore[assignment]


class CreateInboxTableOp(_InboxTableOp):
    """Create an sa-inbox table and its indexes; reverse: :class:`DropInboxTableOp`."""

    drop_class: ClassVar[type[DropInboxTableOp]]

    def reverse(self) -> DropInboxTableOp:
        return self.drop_class(self.table_name, schema=self.schema, **self.options)


class DropInboxTableOp(_InboxTableOp):
    """Drop an sa-inbox table (its indexes go with it); reverse: :class:`CreateInboxTableOp`.

    The factory options are kept so that the reverse re-creates the same table.
    """

    create_class: ClassVar[type[CreateInboxTableOp]]

    def reverse(self) -> CreateInboxTableOp:
        return self.create_class(self.table_name, schema=self.schema, **self.options)


@Operations.implementation_for(CreateInboxTableOp)
def _create(operations: Operations, operation: CreateInboxTableOp) -> None:
    operations.impl.create_table(operation.to_table())


@Operations.implementation_for(DropInboxTableOp)
def _drop(operations: Operations, operation: DropInboxTableOp) -> None:
    operations.impl.drop_table(operation.to_table())


def _pair(create: type[CreateInboxTableOp], drop: type[DropInboxTableOp]) -> None:
    create.drop_class = drop
    drop.create_class = create


# -- the processed-messages table (sa_inbox.Inbox) ------------------------------------------

PROCESSED_MESSAGES = register_kind(
    InboxTableKind(
        name="processed_messages",
        factory=processed_messages_table,
        create_op="create_inbox_table",
        drop_op="drop_inbox_table",
    )
)


@Operations.register_operation("create_inbox_table")
class CreateProcessedMessagesTableOp(CreateInboxTableOp):
    """``op.create_inbox_table()``: the processed-messages table of :class:`sa_inbox.Inbox`."""

    kind = PROCESSED_MESSAGES

    @classmethod
    def create_inbox_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_TABLE_NAME,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        """Create the sa-inbox processed-messages table, its primary key and its index.

        The DDL is that of :func:`sa_inbox.schema.processed_messages_table`:
        ``pk_<table_name>`` on ``(message_id, consumer_name)`` and
        ``ix_<table_name>_received_at``.

        :param table_name: the table's name.
        :param schema: the schema, or ``None`` for the connection's default.
        :param message_id_length: length in characters of ``message_id`` and
            ``consumer_name``; must equal the ``Inbox(...)`` the application builds.
        :raises sa_inbox.alembic.InvalidTableOptions: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, message_id_length=message_id_length))


@Operations.register_operation("drop_inbox_table")
class DropProcessedMessagesTableOp(DropInboxTableOp):
    """``op.drop_inbox_table()``: drop the processed-messages table."""

    kind = PROCESSED_MESSAGES

    @classmethod
    def drop_inbox_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_TABLE_NAME,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        """Drop the sa-inbox processed-messages table (its index goes with it).

        :param table_name: the table's name.
        :param schema: the schema, or ``None`` for the connection's default.
        :param message_id_length: kept for the reverse operation (the re-created table).
        :raises sa_inbox.alembic.InvalidTableOptions: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, message_id_length=message_id_length))


_pair(CreateProcessedMessagesTableOp, DropProcessedMessagesTableOp)


def create_inbox_table(
    op: Invoker,
    table_name: str = DEFAULT_TABLE_NAME,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.create_inbox_table(...)``; ``op`` is ``alembic.op``.

    :raises sa_inbox.alembic.InvalidTableOptions: for a bad name or length, before SQL.
    """
    op.invoke(
        CreateProcessedMessagesTableOp(
            table_name, schema=schema, message_id_length=message_id_length
        )
    )


def drop_inbox_table(
    op: Invoker,
    table_name: str = DEFAULT_TABLE_NAME,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.drop_inbox_table(...)``; ``op`` is ``alembic.op``.

    :raises sa_inbox.alembic.InvalidTableOptions: for a bad name or length, before SQL.
    """
    op.invoke(
        DropProcessedMessagesTableOp(table_name, schema=schema, message_id_length=message_id_length)
    )
