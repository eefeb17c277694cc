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

from .._compat import sort_indexes
from ..consumers import DEFAULT_CONSUMERS_TABLE, consumers_table
from ..exc import UnsupportedBackend
from ..outbox.schema import DEFAULT_MESSAGE_ID_LENGTH as OUTBOX_MESSAGE_ID_LENGTH
from ..outbox.schema import DEFAULT_OUTBOX_TABLE, outbox_table
from ..retention.partitions import DEFAULT_PARTITION_KEY, partitioned_processed_messages_table
from ..schema import DEFAULT_MESSAGE_ID_LENGTH, DEFAULT_TABLE_NAME, processed_messages_table
from ..store import DEFAULT_STORE_TABLE, inbox_store_table
from .tables import InboxTableKind, build_table, register_kind

__all__ = [
    "CONSUMERS",
    "CREATE_OPERATIONS",
    "OUTBOX",
    "PARTITIONED_PROCESSED_MESSAGES",
    "PROCESSED_MESSAGES",
    "STORE",
    "CreateInboxConsumersTableOp",
    "CreateInboxStoreTableOp",
    "CreateInboxTableOp",
    "CreateOutboxTableOp",
    "CreatePartitionedInboxTableOp",
    "CreateProcessedMessagesTableOp",
    "DropInboxConsumersTableOp",
    "DropInboxStoreTableOp",
    "DropInboxTableOp",
    "DropOutboxTableOp",
    "DropPartitionedInboxTableOp",
    "DropProcessedMessagesTableOp",
    "Invoker",
    "create_inbox_consumers_table",
    "create_inbox_store_table",
    "create_inbox_table",
    "create_outbox_table",
    "create_partitioned_inbox_table",
    "drop_inbox_consumers_table",
    "drop_inbox_store_table",
    "drop_inbox_table",
    "drop_outbox_table",
    "drop_partitioned_inbox_table",
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
        #: Comment lines autogenerate writes above the operation; not part of the op.
        self.notes: list[str] = []
        build_table(self.kind, table_name, schema, self.options)  # validate now, not in DDL

    def to_table(self, metadata: sa.MetaData | None = None) -> sa.Table:
        """The table this operation creates or drops, built by the kind's factory.

        Its indexes iterate in name order (``Table.indexes`` is a set), so the DDL of the
        operation, and an offline script, come out the same on every run.
        """
        return sort_indexes(
            build_table(self.kind, self.table_name, self.schema, self.options, metadata)
        )

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

    def to_diff_tuple(self) -> tuple[str, sa.Table]:
        """``("add_table", table)``, as Alembic's create_table: what ``alembic check``
        and :func:`alembic.autogenerate.compare_metadata` report."""
        return ("add_table", self.to_table())


class DropInboxTableOp(_InboxTableOp):
    """Drop an sa-inbox table (its indexes go with it); reverse: :class:`CreateInboxTableOp`.

    The factory options are kept so that the reverse re-creates the same table.
    """

    create_class: ClassVar[type[CreateInboxTableOp]]

    def reverse(self) -> CreateInboxTableOp:
        return self.create_class(self.table_name, schema=self.schema, **self.options)

    def to_diff_tuple(self) -> tuple[str, sa.Table]:
        """``("remove_table", table)``, as Alembic's drop_table."""
        return ("remove_table", self.to_table())


def _check_dialect(operations: Operations, operation: _InboxTableOp) -> None:
    dialects = operation.kind.dialects
    name = operations.impl.dialect.name
    if dialects is not None and name not in dialects:
        raise UnsupportedBackend(
            f"{operation.kind.create_op}: the {operation.kind.name} table exists only on "
            f"{', '.join(sorted(dialects))}, not on {name}"
        )


@Operations.implementation_for(CreateInboxTableOp)
def _create(operations: Operations, operation: CreateInboxTableOp) -> None:
    _check_dialect(operations, operation)
    operations.impl.create_table(operation.to_table())


@Operations.implementation_for(DropInboxTableOp)
def _drop(operations: Operations, operation: DropInboxTableOp) -> None:
    _check_dialect(operations, operation)
    operations.impl.drop_table(operation.to_table())


#: The create operation of each table kind, by kind name (read by autogenerate).
CREATE_OPERATIONS: dict[str, type[CreateInboxTableOp]] = {}


def _pair(create: type[CreateInboxTableOp], drop: type[DropInboxTableOp]) -> None:
    create.drop_class = drop
    drop.create_class = create
    CREATE_OPERATIONS[create.kind.name] = create


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
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
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
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, message_id_length=message_id_length))


_pair(CreateProcessedMessagesTableOp, DropProcessedMessagesTableOp)


# -- the inbox store (sa_inbox.store.InboxStore) --------------------------------------------

STORE = register_kind(
    InboxTableKind(
        name="store",
        factory=inbox_store_table,
        create_op="create_inbox_store_table",
        drop_op="drop_inbox_store_table",
    )
)


@Operations.register_operation("create_inbox_store_table")
class CreateInboxStoreTableOp(CreateInboxTableOp):
    """``op.create_inbox_store_table()``: the table of :class:`sa_inbox.store.InboxStore`."""

    kind = STORE

    @classmethod
    def create_inbox_store_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_STORE_TABLE,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        """Create the sa-inbox store table, its constraints and its three indexes.

        The DDL is that of :func:`sa_inbox.store.inbox_store_table`.

        :param table_name: the table's name.
        :param schema: the schema, or ``None`` for the connection's default.
        :param message_id_length: length in characters of ``message_id`` and
            ``consumer_name``; must equal the ``InboxStore(...)`` the application builds.
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, message_id_length=message_id_length))


@Operations.register_operation("drop_inbox_store_table")
class DropInboxStoreTableOp(DropInboxTableOp):
    """``op.drop_inbox_store_table()``: drop the inbox store table."""

    kind = STORE

    @classmethod
    def drop_inbox_store_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_STORE_TABLE,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        """Drop the sa-inbox store table (its indexes go with it).

        :param message_id_length: kept for the reverse operation (the re-created table).
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, message_id_length=message_id_length))


_pair(CreateInboxStoreTableOp, DropInboxStoreTableOp)


# -- the outbox (sa_inbox.outbox.Outbox) ---------------------------------------------------

OUTBOX = register_kind(
    InboxTableKind(
        name="outbox",
        factory=outbox_table,
        create_op="create_outbox_table",
        drop_op="drop_outbox_table",
    )
)


@Operations.register_operation("create_outbox_table")
class CreateOutboxTableOp(CreateInboxTableOp):
    """``op.create_outbox_table()``: the table of :class:`sa_inbox.outbox.Outbox`."""

    kind = OUTBOX

    @classmethod
    def create_outbox_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_OUTBOX_TABLE,
        *,
        schema: str | None = None,
        message_id_length: int = OUTBOX_MESSAGE_ID_LENGTH,
    ) -> None:
        """Create the outbox table, its constraints and its three indexes.

        The DDL is that of :func:`sa_inbox.outbox.outbox_table`.

        :param table_name: the table's name.
        :param schema: the schema, or ``None`` for the connection's default.
        :param message_id_length: length in characters of ``message_id`` (>= 36); must
            equal the ``Outbox(...)`` the application builds.
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, message_id_length=message_id_length))


@Operations.register_operation("drop_outbox_table")
class DropOutboxTableOp(DropInboxTableOp):
    """``op.drop_outbox_table()``: drop the outbox table."""

    kind = OUTBOX

    @classmethod
    def drop_outbox_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_OUTBOX_TABLE,
        *,
        schema: str | None = None,
        message_id_length: int = OUTBOX_MESSAGE_ID_LENGTH,
    ) -> None:
        """Drop the outbox table (its indexes go with it).

        :param message_id_length: kept for the reverse operation (the re-created table).
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, message_id_length=message_id_length))


_pair(CreateOutboxTableOp, DropOutboxTableOp)


# -- the consumers table (sa_inbox.consumers) -----------------------------------------------

CONSUMERS = register_kind(
    InboxTableKind(
        name="consumers",
        factory=consumers_table,
        create_op="create_inbox_consumers_table",
        drop_op="drop_inbox_consumers_table",
        length_column="consumer_name",
        length_option="consumer_name_length",
    )
)


@Operations.register_operation("create_inbox_consumers_table")
class CreateInboxConsumersTableOp(CreateInboxTableOp):
    """``op.create_inbox_consumers_table()``: the table recording which handler owns each
    consumer name (:mod:`sa_inbox.consumers`), shared by the inboxes and stores of a
    MetaData and schema."""

    kind = CONSUMERS

    @classmethod
    def create_inbox_consumers_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_CONSUMERS_TABLE,
        *,
        schema: str | None = None,
        consumer_name_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        """Create the consumers table and its primary key ``pk_<table_name>`` on
        ``(inbox_table, consumer_name)`` (the DDL of
        :func:`sa_inbox.consumers.consumers_table`).

        :param table_name: the table's name.
        :param schema: the schema of the inbox tables it serves, or ``None``.
        :param consumer_name_length: length in characters of ``consumer_name``: at least the
            ``message_id_length`` of each inbox and store of the schema (``Inbox(metadata)``
            defines it with ``max(255, message_id_length)``).
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, consumer_name_length=consumer_name_length))


@Operations.register_operation("drop_inbox_consumers_table")
class DropInboxConsumersTableOp(DropInboxTableOp):
    """``op.drop_inbox_consumers_table()``: drop the consumers table."""

    kind = CONSUMERS

    @classmethod
    def drop_inbox_consumers_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_CONSUMERS_TABLE,
        *,
        schema: str | None = None,
        consumer_name_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    ) -> None:
        """Drop the consumers table: the owners it records are forgotten (the next handler
        to claim under a name becomes its owner).

        :param consumer_name_length: kept for the reverse operation (the re-created table).
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
        """
        operations.invoke(cls(table_name, schema=schema, consumer_name_length=consumer_name_length))


_pair(CreateInboxConsumersTableOp, DropInboxConsumersTableOp)


# -- the PostgreSQL partitioned processed-messages table (sa_inbox.retention.partitions) ----

PARTITIONED_PROCESSED_MESSAGES = register_kind(
    InboxTableKind(
        name="partitioned_processed_messages",
        factory=partitioned_processed_messages_table,
        create_op="create_partitioned_inbox_table",
        drop_op="drop_partitioned_inbox_table",
        dialects=frozenset({"postgresql"}),
    )
)


@Operations.register_operation("create_partitioned_inbox_table")
class CreatePartitionedInboxTableOp(CreateInboxTableOp):
    """``op.create_partitioned_inbox_table()``: the partitioned table of
    :class:`sa_inbox.retention.partitions.PartitionedInbox` (PostgreSQL only)."""

    kind = PARTITIONED_PROCESSED_MESSAGES

    @classmethod
    def create_partitioned_inbox_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_TABLE_NAME,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
        partition_key: str = DEFAULT_PARTITION_KEY,
    ) -> None:
        """Create the partitioned parent table ``PARTITION BY RANGE (partition_key)``.

        The DDL is that of
        :func:`sa_inbox.retention.partitions.partitioned_processed_messages_table`. No
        partition is created: run :func:`sa_inbox.retention.partitions.ensure_partitions` (or
        ``sa-inbox partitions maintain``) before the first claim. Autogenerate ignores
        the partitions of a marked partitioned table.

        :param partition_key: the column of the message's own time.
        :raises sa_inbox.exc.InvalidArgument: for a bad name or length, or an
            arrival-time partition key, before SQL.
        :raises sa_inbox.exc.UnsupportedBackend: on any database but PostgreSQL.
        """
        operations.invoke(
            cls(
                table_name,
                schema=schema,
                message_id_length=message_id_length,
                partition_key=partition_key,
            )
        )


@Operations.register_operation("drop_partitioned_inbox_table")
class DropPartitionedInboxTableOp(DropInboxTableOp):
    """``op.drop_partitioned_inbox_table()``: drop the partitioned table and its partitions."""

    kind = PARTITIONED_PROCESSED_MESSAGES

    @classmethod
    def drop_partitioned_inbox_table(
        cls,
        operations: Operations,
        table_name: str = DEFAULT_TABLE_NAME,
        *,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
        partition_key: str = DEFAULT_PARTITION_KEY,
    ) -> None:
        """Drop the partitioned table; PostgreSQL drops its partitions with it.

        :raises sa_inbox.exc.InvalidArgument: for bad options, before SQL.
        :raises sa_inbox.exc.UnsupportedBackend: on any database but PostgreSQL.
        """
        operations.invoke(
            cls(
                table_name,
                schema=schema,
                message_id_length=message_id_length,
                partition_key=partition_key,
            )
        )


_pair(CreatePartitionedInboxTableOp, DropPartitionedInboxTableOp)


# -- typed spellings ----------------------------------------------------------------------


def create_inbox_table(
    op: Invoker,
    table_name: str = DEFAULT_TABLE_NAME,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.create_inbox_table(...)``; ``op`` is ``alembic.op``.

    :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
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

    :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
    """
    op.invoke(
        DropProcessedMessagesTableOp(table_name, schema=schema, message_id_length=message_id_length)
    )


def create_inbox_store_table(
    op: Invoker,
    table_name: str = DEFAULT_STORE_TABLE,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.create_inbox_store_table(...)``; ``op`` is ``alembic.op``."""
    op.invoke(
        CreateInboxStoreTableOp(table_name, schema=schema, message_id_length=message_id_length)
    )


def drop_inbox_store_table(
    op: Invoker,
    table_name: str = DEFAULT_STORE_TABLE,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.drop_inbox_store_table(...)``; ``op`` is ``alembic.op``."""
    op.invoke(DropInboxStoreTableOp(table_name, schema=schema, message_id_length=message_id_length))


def create_inbox_consumers_table(
    op: Invoker,
    table_name: str = DEFAULT_CONSUMERS_TABLE,
    *,
    schema: str | None = None,
    consumer_name_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.create_inbox_consumers_table(...)``; ``op`` is ``alembic.op``."""
    op.invoke(
        CreateInboxConsumersTableOp(
            table_name, schema=schema, consumer_name_length=consumer_name_length
        )
    )


def drop_inbox_consumers_table(
    op: Invoker,
    table_name: str = DEFAULT_CONSUMERS_TABLE,
    *,
    schema: str | None = None,
    consumer_name_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.drop_inbox_consumers_table(...)``; ``op`` is ``alembic.op``."""
    op.invoke(
        DropInboxConsumersTableOp(
            table_name, schema=schema, consumer_name_length=consumer_name_length
        )
    )


def create_partitioned_inbox_table(
    op: Invoker,
    table_name: str = DEFAULT_TABLE_NAME,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    partition_key: str = DEFAULT_PARTITION_KEY,
) -> None:
    """Typed spelling of ``op.create_partitioned_inbox_table(...)`` (PostgreSQL only)."""
    op.invoke(
        CreatePartitionedInboxTableOp(
            table_name,
            schema=schema,
            message_id_length=message_id_length,
            partition_key=partition_key,
        )
    )


def drop_partitioned_inbox_table(
    op: Invoker,
    table_name: str = DEFAULT_TABLE_NAME,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    partition_key: str = DEFAULT_PARTITION_KEY,
) -> None:
    """Typed spelling of ``op.drop_partitioned_inbox_table(...)`` (PostgreSQL only)."""
    op.invoke(
        DropPartitionedInboxTableOp(
            table_name,
            schema=schema,
            message_id_length=message_id_length,
            partition_key=partition_key,
        )
    )


def create_outbox_table(
    op: Invoker,
    table_name: str = DEFAULT_OUTBOX_TABLE,
    *,
    schema: str | None = None,
    message_id_length: int = OUTBOX_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.create_outbox_table(...)``; ``op`` is ``alembic.op``."""
    op.invoke(CreateOutboxTableOp(table_name, schema=schema, message_id_length=message_id_length))


def drop_outbox_table(
    op: Invoker,
    table_name: str = DEFAULT_OUTBOX_TABLE,
    *,
    schema: str | None = None,
    message_id_length: int = OUTBOX_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.drop_outbox_table(...)``; ``op`` is ``alembic.op``."""
    op.invoke(DropOutboxTableOp(table_name, schema=schema, message_id_length=message_id_length))
