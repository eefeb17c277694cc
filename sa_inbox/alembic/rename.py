"""Rename an sa-inbox table with its rows: ``op.rename_inbox_table(old, new)`` and friends.

A drop + create forgets every row: for the processed-messages table, every message id
claimed so far, so each redelivery within the retention window would be applied again. A
rename keeps the rows, and renames with the table the names the factory derives from it
(``pk_<table>``, ``ix_<table>_received_at``, the store's and the outbox's ``uq_`` / ``ck_`` /
``ix_`` names): on PostgreSQL and Oracle a claim tells a duplicate by the primary key's name
(:mod:`sa_inbox.dialects.postgresql`), and ``alembic check`` compares index names. So the
renamed table is exactly what ``op.create_<kind>(new)`` would have made. Per backend:

- PostgreSQL: ``ALTER TABLE … RENAME TO``, ``ALTER INDEX … RENAME TO``, ``ALTER TABLE … RENAME
  CONSTRAINT`` (which renames a primary key's or unique constraint's index too; manual,
  "ALTER TABLE", ``RENAME CONSTRAINT``). Names PostgreSQL chose itself (``<table>_pkey``,
  an identity's sequence) keep the old name.
- MySQL/MariaDB: ``ALTER TABLE … RENAME``, ``ALTER TABLE … RENAME INDEX`` for indexes and
  unique constraints (MySQL 5.7, MariaDB 10.5.2; MariaDB KB "ALTER TABLE"); a ``CHECK``
  constraint cannot be renamed, so it is dropped and added under the new name. A primary key
  is always called ``PRIMARY`` there.
- SQLite: ``ALTER TABLE … RENAME`` would keep the old constraint names inside the stored
  ``CREATE TABLE`` and SQLite cannot rename an index (SQLite docs, "ALTER TABLE"), so the new
  table is created, the rows copied (``INSERT … SELECT``) and the old table dropped, in the
  migration's transaction.
- Oracle: ``ALTER TABLE … RENAME TO``, ``ALTER TABLE … RENAME CONSTRAINT``, and ``ALTER INDEX
  … RENAME TO`` for the indexes, including those of the primary key and unique constraints
  (they carry the constraint's name; Oracle SQL Language Reference, "ALTER INDEX").

The owners of the table's consumer names (:mod:`sa_inbox.consumers`: rows of
``inbox_consumers`` keyed by the table's name) move with the processed-messages and store
tables: ``UPDATE inbox_consumers SET inbox_table = <new> WHERE inbox_table = <old>``, in the
same transaction, when that table exists (offline, always printed). Without it every consumer
name of the renamed table would be free again, for any handler to take.

Offline (``--sql``) the same statements are printed. The reverse renames back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations

from .._compat import sort_indexes
from ..consumers import DEFAULT_CONSUMERS_TABLE
from ..exc import InvalidArgument, UnsupportedBackend
from ..schema import DEFAULT_MESSAGE_ID_LENGTH
from .operations import OUTBOX, PROCESSED_MESSAGES, STORE, Invoker, classmethod_named, spelling
from .tables import InboxTableKind, build_table

__all__ = [
    "RENAME_OPERATIONS",
    "RenameInboxStoreTableOp",
    "RenameInboxTableOp",
    "RenameOutboxTableOp",
    "RenameProcessedMessagesTableOp",
    "move_owners",
    "rename_inbox_store_table",
    "rename_inbox_table",
    "rename_outbox_table",
    "renamed_items",
]

#: An index or a named constraint of a factory table.
Item = sa.Index | sa.Constraint


class RenameInboxTableOp(MigrateOperation):
    """Rename an sa-inbox table, its rows kept; reverse: the rename back.

    :param old_table_name: the table's name in the database now.
    :param new_table_name: its new name (the models' ``Inbox(metadata, table_name=...)``).
    :param schema: the schema of both, or ``None`` for the connection's default.
    :param options: the factory options (``message_id_length``) the table was created with.
    :raises InvalidArgument: for a bad name, option, or the same name twice, before SQL.
    """

    kind: ClassVar[InboxTableKind]
    #: The operation's name on ``op``.
    op_name: ClassVar[str]
    #: What the rows are, for the comment autogenerate writes above the operation.
    rows: ClassVar[str]
    #: Whether the table's consumer names have owners in the consumers table, which move
    #: with it (``move_owners``).
    owned: ClassVar[bool] = False

    def __init__(
        self,
        old_table_name: str,
        new_table_name: str,
        *,
        schema: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        self.old_table_name = old_table_name
        self.new_table_name = new_table_name
        self.schema = schema
        self.options = dict(options)
        #: Extra lines for the revision's comment (set by autogenerate), not part of the op.
        self.notes: list[str] = []
        if old_table_name == new_table_name:
            raise InvalidArgument(f"{self.op_name}: old and new name are both {old_table_name!r}")
        self.tables()  # validate now, not in DDL

    def tables(self) -> tuple[sa.Table, sa.Table]:
        """The table before and after, both built by the kind's factory.

        :raises InvalidArgument: if the factory rejects a name or the options.
        """
        metadata = sa.MetaData()
        return tuple(  # type: ignore[return-value]
            sort_indexes(build_table(self.kind, name, self.schema, self.options, metadata))
            for name in (self.old_table_name, self.new_table_name)
        )

    def reverse(self) -> RenameInboxTableOp:
        return type(self)(
            self.new_table_name, self.old_table_name, schema=self.schema, **self.options
        )

    def to_diff_tuple(self) -> tuple[str, str | None, str, str]:
        """``("rename_table", schema, old name, new name)``, for ``alembic check``."""
        return ("rename_table", self.schema, self.old_table_name, self.new_table_name)

    def __repr__(self) -> str:
        options = "".join(f", {key}={value!r}" for key, value in sorted(self.options.items()))
        return (
            f"{type(self).__name__}({self.old_table_name!r}, {self.new_table_name!r}, "
            f"schema={self.schema!r}{options})"
        )

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, RenameInboxTableOp)
            and (other.old_table_name, other.new_table_name, other.schema, other.options)
            == (self.old_table_name, self.new_table_name, self.schema, self.options)
        )

    __hash__ = None  # type: ignore[assignment]


# -- what a rename renames ------------------------------------------------------------------


def _signature(item: Item) -> tuple[Any, ...] | None:
    """What an index or constraint is, apart from its name; ``None`` for other kinds."""
    if isinstance(item, sa.Index):
        return ("index", tuple(column.name for column in item.columns), bool(item.unique))
    if isinstance(item, sa.PrimaryKeyConstraint):
        return ("primary_key",)
    if isinstance(item, sa.UniqueConstraint):
        return ("unique", tuple(column.name for column in item.columns))
    if isinstance(item, sa.CheckConstraint):
        return ("check", str(item.sqltext))
    return None


def _named(table: sa.Table) -> dict[tuple[Any, ...], Item]:
    items: list[Item] = [*table.indexes, *table.constraints]
    return {
        signature: item
        for item in items
        if isinstance(item.name, str) and (signature := _signature(item)) is not None
    }


def renamed_items(old: sa.Table, new: sa.Table) -> list[tuple[Item, Item]]:
    """``(old item, new item)`` for each named index and constraint whose name changes.

    Items are paired by what they are (columns, uniqueness, check expression), not by name,
    so no name is guessed from another. Ordered by the old name.
    """
    before, after = _named(old), _named(new)
    assert before.keys() == after.keys(), "one factory, one set of items"
    pairs = [(before[key], after[key]) for key in before if before[key].name != after[key].name]
    return sorted(pairs, key=lambda pair: str(pair[0].name))


# -- per backend ----------------------------------------------------------------------------


def _quote(operations: Operations, name: object) -> str:
    return operations.impl.dialect.identifier_preparer.quote(str(name))


def _index_name(operations: Operations, name: object, schema: str | None) -> str:
    """An index's name, schema-qualified where the index lives in the schema."""
    quoted = _quote(operations, name)
    if schema is None:
        return quoted
    return f"{operations.impl.dialect.identifier_preparer.quote_schema(schema)}.{quoted}"


def _table_name(operations: Operations, table: sa.Table) -> str:
    return operations.impl.dialect.identifier_preparer.format_table(table)


def _rename_constraint(operations: Operations, table: sa.Table, old: Item, new: Item) -> None:
    operations.execute(
        f"ALTER TABLE {_table_name(operations, table)} RENAME CONSTRAINT "
        f"{_quote(operations, old.name)} TO {_quote(operations, new.name)}"
    )


def _rename_index(operations: Operations, schema: str | None, old: Item, new: Item) -> None:
    operations.execute(
        f"ALTER INDEX {_index_name(operations, old.name, schema)} "
        f"RENAME TO {_quote(operations, new.name)}"
    )


def _rename_postgresql(operations: Operations, old: sa.Table, new: sa.Table) -> None:
    operations.rename_table(old.name, new.name, schema=new.schema)
    for before, after in renamed_items(old, new):
        if isinstance(before, sa.Index):
            _rename_index(operations, new.schema, before, after)
        else:
            _rename_constraint(operations, new, before, after)


def _rename_oracle(operations: Operations, old: sa.Table, new: sa.Table) -> None:
    operations.rename_table(old.name, new.name, schema=new.schema)
    for before, after in renamed_items(old, new):
        if not isinstance(before, sa.Index):
            _rename_constraint(operations, new, before, after)
        if isinstance(before, sa.Index | sa.PrimaryKeyConstraint | sa.UniqueConstraint):
            _rename_index(operations, new.schema, before, after)


def _rename_mysql(operations: Operations, old: sa.Table, new: sa.Table) -> None:
    operations.rename_table(old.name, new.name, schema=new.schema)
    for before, after in renamed_items(old, new):
        if isinstance(before, sa.PrimaryKeyConstraint):
            continue  # always PRIMARY
        if isinstance(before, sa.CheckConstraint):
            assert isinstance(after, sa.CheckConstraint)
            operations.drop_constraint(str(before.name), new.name, type_="check", schema=new.schema)
            operations.create_check_constraint(
                str(after.name), new.name, after.sqltext, schema=new.schema
            )
            continue
        operations.execute(
            f"ALTER TABLE {_table_name(operations, new)} RENAME INDEX "
            f"{_quote(operations, before.name)} TO {_quote(operations, after.name)}"
        )


def _rename_sqlite(operations: Operations, old: sa.Table, new: sa.Table) -> None:
    operations.impl.create_table(new)
    columns = [column.name for column in old.columns]
    operations.execute(sa.insert(new).from_select(columns, sa.select(*old.columns)))
    operations.impl.drop_table(old)


#: How each backend renames, by SQLAlchemy dialect name.
RENAMERS: dict[str, Callable[[Operations, sa.Table, sa.Table], None]] = {
    "postgresql": _rename_postgresql,
    "mysql": _rename_mysql,
    "mariadb": _rename_mysql,
    "sqlite": _rename_sqlite,
    "oracle": _rename_oracle,
}


@Operations.implementation_for(RenameInboxTableOp)
def _rename(operations: Operations, operation: RenameInboxTableOp) -> None:
    name = operations.impl.dialect.name
    renamer = RENAMERS.get(name)
    if renamer is None:
        raise UnsupportedBackend(
            f"{operation.op_name}: sa-inbox renames tables on "
            f"{', '.join(sorted(RENAMERS))}, not on {name}"
        )
    renamer(operations, *operation.tables())
    if operation.owned:
        move_owners(
            operations, operation.old_table_name, operation.new_table_name, operation.schema
        )


def move_owners(
    operations: Operations, old_table_name: str, new_table_name: str, schema: str | None
) -> None:
    """Point the consumers table's owner rows of ``old_table_name`` at ``new_table_name``
    (see the module); nothing when that table does not exist (online)."""
    if not operations.get_context().as_sql:
        inspector = sa.inspect(operations.get_bind())
        if not inspector.has_table(DEFAULT_CONSUMERS_TABLE, schema=schema):
            return
    owners = sa.table(DEFAULT_CONSUMERS_TABLE, sa.column("inbox_table", sa.String), schema=schema)
    update = (
        sa.update(owners)
        .where(owners.c.inbox_table == old_table_name)
        .values(inbox_table=new_table_name)
    )
    # the names as literals (quoted by the dialect), so that --sql prints runnable SQL
    compiled = update.compile(
        dialect=operations.impl.dialect, compile_kwargs={"literal_binds": True}
    )
    operations.execute(str(compiled))


#: The rename operation of each table kind that has one, by kind name (read by autogenerate).
RENAME_OPERATIONS: dict[str, type[RenameInboxTableOp]] = {}


def _operation(kind: InboxTableKind, name: str) -> Any:
    """The classmethod behind ``op.<name>(old, new)``, from which Alembic builds the proxy."""

    def operation(
        cls: type[RenameInboxTableOp],
        operations: Operations,
        old_table_name: str,
        new_table_name: str,
        *,
        schema: str | None = None,
        **options: Any,
    ) -> None:
        names = (old_table_name, new_table_name)
        operations.invoke(cls(*names, schema=schema, **kind.options(options)))

    return classmethod_named(operation, name)


class _RenameOp(RenameInboxTableOp):
    """A rename registered as ``op.<op_name>(old, new)`` for ``kind`` (the subclass's
    keywords), with ``rows`` saying what the kept rows are."""

    def __init_subclass__(
        cls, *, kind: InboxTableKind, op_name: str, rows: str, owned: bool = False, **kw: Any
    ) -> None:
        super().__init_subclass__(**kw)
        cls.kind, cls.op_name, cls.rows, cls.owned = kind, op_name, rows, owned
        setattr(cls, op_name, _operation(kind, op_name))
        Operations.register_operation(op_name)(cls)
        RENAME_OPERATIONS[kind.name] = cls


class RenameProcessedMessagesTableOp(
    _RenameOp,
    kind=PROCESSED_MESSAGES,
    op_name="rename_inbox_table",
    rows="the message ids claimed in it",
    owned=True,
):
    """``op.rename_inbox_table(old, new)``: rename the processed-messages table, its rows
    (the claimed ids) kept: ``pk_<old>`` and ``ix_<old>_received_at`` become ``pk_<new>``
    and ``ix_<new>_received_at`` (see :mod:`sa_inbox.alembic.rename` for each backend's SQL;
    SQLite copies the rows into a new table of ``message_id_length``); the owners of its
    consumer names in ``inbox_consumers`` move with it."""


class RenameInboxStoreTableOp(
    _RenameOp,
    kind=STORE,
    op_name="rename_inbox_store_table",
    rows="the messages stored in it and their dedup keys",
    owned=True,
):
    """``op.rename_inbox_store_table(old, new)``: rename the inbox store table, its rows kept
    (``uq_``, ``ck_``, ``ix_`` names too), and the owners of its consumer names in
    ``inbox_consumers`` with it."""


class RenameOutboxTableOp(
    _RenameOp,
    kind=OUTBOX,
    op_name="rename_outbox_table",
    rows="the messages in it not yet sent",
):
    """``op.rename_outbox_table(old, new)``: rename the outbox table, its rows kept
    (``uq_``, ``ck_``, ``ix_`` names too)."""


# -- typed spellings ----------------------------------------------------------------------


def rename_inbox_table(
    op: Invoker,
    old_table_name: str,
    new_table_name: str,
    *,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> None:
    """Typed spelling of ``op.rename_inbox_table(...)``; ``op`` is ``alembic.op``.

    :raises sa_inbox.exc.InvalidArgument: for a bad name or length, before SQL.
    :raises sa_inbox.exc.UnsupportedBackend: on a backend without a rename here.
    """
    names = (old_table_name, new_table_name)
    op.invoke(
        RenameProcessedMessagesTableOp(*names, schema=schema, message_id_length=message_id_length)
    )


rename_inbox_store_table = spelling(RenameInboxStoreTableOp, rename_inbox_table)
rename_outbox_table = spelling(RenameOutboxTableOp, rename_inbox_table)
