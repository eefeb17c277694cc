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

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, ParamSpec, Protocol

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations

from .._compat import sort_indexes
from ..consumers import DEFAULT_CONSUMERS_TABLE, consumers_table
from ..exc import UnsupportedBackend
from ..outbox.schema import outbox_table
from ..retention.partitions import DEFAULT_PARTITION_KEY, partitioned_processed_messages_table
from ..schema import DEFAULT_MESSAGE_ID_LENGTH, DEFAULT_TABLE_NAME, processed_messages_table
from ..store import inbox_store_table
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
    "classmethod_named",
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
    "spelling",
]


P = ParamSpec("P")

#: The create operation of each table kind, by kind name (read by autogenerate).
CREATE_OPERATIONS: dict[str, type[CreateInboxTableOp]] = {}


class Invoker(Protocol):
    """Anything that runs a migration operation: an :class:`Operations` or ``alembic.op``."""

    def invoke(self, operation: MigrateOperation) -> Any: ...


class _InboxTableOp(MigrateOperation):
    """An sa-inbox table, named and configured; subclasses fix :attr:`kind`."""

    kind: ClassVar[InboxTableKind]
    #: The operation's name on ``op``.
    op_name: ClassVar[str]

    def __init__(self, table_name: str, *, schema: str | None = None, **options: Any) -> None:
        super().__init__()
        self.table_name = table_name
        self.schema = schema
        self.options = dict(options)
        #: Comment lines autogenerate writes above the operation; not part of the op.
        self.notes: list[str] = []
        build_table(self.kind, table_name, schema, self.options)  # validate now, not in DDL

    @classmethod
    def _register(cls, kind: InboxTableKind, name: str) -> None:
        """Make this class the operation ``op.<name>()`` on tables of ``kind``."""
        cls.kind = kind
        cls.op_name = name
        setattr(cls, name, _operation(kind, name))
        Operations.register_operation(name)(cls)

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


def _operation(kind: InboxTableKind, name: str) -> Any:
    """The classmethod behind ``op.<name>()``, from which Alembic builds the proxy: the
    table's name (the factory's default), ``schema`` and the factory's options
    (:meth:`~sa_inbox.alembic.tables.InboxTableKind.options`)."""

    def operation(
        cls: type[_InboxTableOp],
        operations: Operations,
        table_name: str = kind.defaults["table_name"],
        *,
        schema: str | None = None,
        **options: Any,
    ) -> None:
        operations.invoke(cls(table_name, schema=schema, **kind.options(options)))

    return classmethod_named(operation, name)


def classmethod_named(operation: Callable[..., None], name: str) -> Any:
    """``operation`` as the classmethod ``name`` Alembic registers on ``op``."""
    operation.__name__ = operation.__qualname__ = name
    operation.__doc__ = f"``op.{name}()``; typed spelling: :func:`sa_inbox.alembic.{name}`."
    return classmethod(operation)


class CreateInboxTableOp(_InboxTableOp):
    """Create an sa-inbox table and its indexes; reverse: :class:`DropInboxTableOp`.

    A subclass names its table kind (``class CreateX(CreateInboxTableOp, kind=X)``) and is
    registered as ``op.<kind.create_op>()``.
    """

    drop_class: ClassVar[type[DropInboxTableOp]]

    def __init_subclass__(cls, *, kind: InboxTableKind | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if kind is not None:
            cls._register(kind, kind.create_op)
            CREATE_OPERATIONS[kind.name] = cls

    def reverse(self) -> DropInboxTableOp:
        return self.drop_class(self.table_name, schema=self.schema, **self.options)

    def to_diff_tuple(self) -> tuple[str, sa.Table]:
        """``("add_table", table)``, as Alembic's create_table: what ``alembic check``
        and :func:`alembic.autogenerate.compare_metadata` report."""
        return ("add_table", self.to_table())


class DropInboxTableOp(_InboxTableOp):
    """Drop an sa-inbox table (its indexes go with it); reverse: :class:`CreateInboxTableOp`.

    The factory options are kept so that the reverse re-creates the same table. A subclass
    names its table kind, after the create operation's (``class DropX(DropInboxTableOp,
    kind=X)``), and is registered as ``op.<kind.drop_op>()``.
    """

    create_class: ClassVar[type[CreateInboxTableOp]]

    def __init_subclass__(cls, *, kind: InboxTableKind | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if kind is not None:
            cls._register(kind, kind.drop_op)
            cls.create_class = CREATE_OPERATIONS[kind.name]
            cls.create_class.drop_class = cls

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


# -- the table kinds and their operations ---------------------------------------------------

#: The processed-messages table (:class:`sa_inbox.Inbox`).
PROCESSED_MESSAGES = register_kind(
    InboxTableKind(
        name="processed_messages",
        factory=processed_messages_table,
        create_op="create_inbox_table",
        drop_op="drop_inbox_table",
    )
)
#: The inbox store's table (:class:`sa_inbox.store.InboxStore`).
STORE = register_kind(
    InboxTableKind(
        name="store",
        factory=inbox_store_table,
        create_op="create_inbox_store_table",
        drop_op="drop_inbox_store_table",
    )
)
#: The outbox's table (:class:`sa_inbox.outbox.Outbox`).
OUTBOX = register_kind(
    InboxTableKind(
        name="outbox",
        factory=outbox_table,
        create_op="create_outbox_table",
        drop_op="drop_outbox_table",
    )
)
#: The consumers table (:mod:`sa_inbox.consumers`): the handler owning each consumer name,
#: shared by the inboxes and stores of a MetaData and schema.
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
#: The PostgreSQL partitioned processed-messages table
#: (:class:`sa_inbox.retention.partitions.PartitionedInbox`).
PARTITIONED_PROCESSED_MESSAGES = register_kind(
    InboxTableKind(
        name="partitioned_processed_messages",
        factory=partitioned_processed_messages_table,
        create_op="create_partitioned_inbox_table",
        drop_op="drop_partitioned_inbox_table",
        dialects=frozenset({"postgresql"}),
    )
)


class CreateProcessedMessagesTableOp(CreateInboxTableOp, kind=PROCESSED_MESSAGES):
    """``op.create_inbox_table()``: the processed-messages table of :class:`sa_inbox.Inbox`."""


class DropProcessedMessagesTableOp(DropInboxTableOp, kind=PROCESSED_MESSAGES):
    """``op.drop_inbox_table()``: drop the processed-messages table."""


class CreateInboxStoreTableOp(CreateInboxTableOp, kind=STORE):
    """``op.create_inbox_store_table()``: the table of :class:`sa_inbox.store.InboxStore`."""


class DropInboxStoreTableOp(DropInboxTableOp, kind=STORE):
    """``op.drop_inbox_store_table()``: drop the inbox store table."""


class CreateOutboxTableOp(CreateInboxTableOp, kind=OUTBOX):
    """``op.create_outbox_table()``: the table of :class:`sa_inbox.outbox.Outbox`."""


class DropOutboxTableOp(DropInboxTableOp, kind=OUTBOX):
    """``op.drop_outbox_table()``: drop the outbox table."""


class CreateInboxConsumersTableOp(CreateInboxTableOp, kind=CONSUMERS):
    """``op.create_inbox_consumers_table()``: the consumers table."""


class DropInboxConsumersTableOp(DropInboxTableOp, kind=CONSUMERS):
    """``op.drop_inbox_consumers_table()``: drop the consumers table (the owners it records
    are forgotten: the next handler to claim under a name becomes its owner)."""


class CreatePartitionedInboxTableOp(CreateInboxTableOp, kind=PARTITIONED_PROCESSED_MESSAGES):
    """``op.create_partitioned_inbox_table()``: the partitioned table of
    :class:`sa_inbox.retention.partitions.PartitionedInbox` (PostgreSQL only)."""


class DropPartitionedInboxTableOp(DropInboxTableOp, kind=PARTITIONED_PROCESSED_MESSAGES):
    """``op.drop_partitioned_inbox_table()``: drop the partitioned table and its partitions."""


# -- typed spellings ----------------------------------------------------------------------


def spelling(operation: Any, like: Callable[P, None]) -> Callable[P, None]:
    """The typed spelling of ``op.<name>()`` for ``operation`` (a class with a ``kind``),
    with the parameters of the spelling ``like``: an option not given takes the default of
    ``operation.kind``'s factory, which the spelling's signature shows.

    :param operation: the operation class the spelling invokes.
    :param like: a spelling of the same parameters (another table kind's, or the create
        spelling whose arguments a drop keeps for its reverse).
    """
    kind: InboxTableKind = operation.kind
    signature = inspect.signature(like)
    defaults = {k: v for k, v in kind.defaults.items() if k in signature.parameters}
    name: str = operation.op_name

    def spell(*args: P.args, **kwargs: P.kwargs) -> None:
        arguments = signature.bind(*args, **kwargs).arguments
        op = arguments.pop("op")
        op.invoke(operation(**(defaults | arguments)))

    spell.__name__ = spell.__qualname__ = name
    spell.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(default=defaults.get(p.name, p.default))
            for p in signature.parameters.values()
        ]
    )
    spell.__doc__ = (
        f"Typed spelling of ``op.{name}(...)`` (``op`` is ``alembic.op``), with the "
        f"parameters of :func:`{like.__name__}`.\n\n"
        ":raises sa_inbox.exc.InvalidArgument: for a bad name or option, before SQL."
    )
    return spell


def create_inbox_table(
    op: Invoker,
    table_name: str = DEFAULT_TABLE_NAME,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Create the sa-inbox processed-messages table, its primary key and its index: the
    typed spelling of ``op.create_inbox_table(...)`` (``op`` is ``alembic.op``).

    The DDL is that of :func:`sa_inbox.schema.processed_messages_table`:
    ``pk_<table_name>`` on ``(message_id, consumer_name)`` and
    ``ix_<table_name>_received_at``.

    :param table_name: the table's name.
    :param schema: the schema, or ``None`` for the connection's default.
    :param message_id_length: length in characters of ``message_id`` and
        ``consumer_name``; must equal the ``Inbox(...)`` the application builds.
    :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
    """
    op.invoke(
        CreateProcessedMessagesTableOp(
            table_name, schema=schema, message_id_length=message_id_length
        )
    )


drop_inbox_table = spelling(DropProcessedMessagesTableOp, create_inbox_table)


create_inbox_store_table = spelling(CreateInboxStoreTableOp, create_inbox_table)
drop_inbox_store_table = spelling(DropInboxStoreTableOp, create_inbox_table)
create_outbox_table = spelling(CreateOutboxTableOp, create_inbox_table)
drop_outbox_table = spelling(DropOutboxTableOp, create_inbox_table)


def create_inbox_consumers_table(
    op: Invoker,
    table_name: str = DEFAULT_CONSUMERS_TABLE,
    *,
    schema: str | None = None,
    consumer_name_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Create the consumers table and its primary key ``pk_<table_name>`` on
    ``(inbox_table, consumer_name)`` (the DDL of :func:`sa_inbox.consumers.consumers_table`):
    the typed spelling of ``op.create_inbox_consumers_table(...)``.

    :param schema: the schema of the inbox tables it serves, or ``None``.
    :param consumer_name_length: length in characters of ``consumer_name``: at least the
        ``message_id_length`` of each inbox and store of the schema (``Inbox(metadata)``
        defines it with ``max(255, message_id_length)``).
    :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
    """
    op.invoke(
        CreateInboxConsumersTableOp(
            table_name, schema=schema, consumer_name_length=consumer_name_length
        )
    )


drop_inbox_consumers_table = spelling(DropInboxConsumersTableOp, create_inbox_consumers_table)


def create_partitioned_inbox_table(
    op: Invoker,
    table_name: str = DEFAULT_TABLE_NAME,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
    partition_key: str = DEFAULT_PARTITION_KEY,
) -> None:
    """Create the partitioned parent table ``PARTITION BY RANGE (partition_key)`` (the DDL
    of :func:`sa_inbox.retention.partitions.partitioned_processed_messages_table`): the typed
    spelling of ``op.create_partitioned_inbox_table(...)``. No partition is created: run
    :func:`sa_inbox.retention.partitions.ensure_partitions` (or ``sa-inbox partitions
    maintain``) before the first claim.

    :param partition_key: the column of the message's own time.
    :raises sa_inbox.exc.InvalidArgument: for a bad name or length, or an arrival-time
        partition key, before SQL.
    :raises sa_inbox.exc.UnsupportedBackend: on any database but PostgreSQL.
    """
    options = {"message_id_length": message_id_length, "partition_key": partition_key}
    op.invoke(CreatePartitionedInboxTableOp(table_name, schema=schema, **options))


drop_partitioned_inbox_table = spelling(DropPartitionedInboxTableOp, create_partitioned_inbox_table)
