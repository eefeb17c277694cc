"""Autogenerate support: sa-inbox tables render as ``op.create_inbox_table(...)``.

Alembic's own table comparator turns every table of the target MetaData that the database
lacks into a ``CreateTableOp`` (plus ``CreateIndexOp`` for its indexes).
:func:`rewrite_inbox_tables` runs after it (priority ``LAST`` of the ``"schema"``
comparators) and replaces those ops, for the tables an sa-inbox factory marked, by the
sa-inbox operation of that kind; the renderers below write it into the revision file with
the ``import sa_inbox.alembic`` line that makes ``op.create_inbox_table`` exist when the
revision runs. Tables the database already has are compared by Alembic as usual, so a
second autogenerate after the upgrade is empty. A table removed from the MetaData that is
recognisably an sa-inbox one renders ``op.drop_inbox_table(...)`` (downgrade: the create
op), unless :mod:`sa_inbox.alembic.pairing` renames it to the table that came in its place
(``op.rename_inbox_table(old, new)``) or refuses to drop it (``op.refuse_inbox_table_drop``);
each of these carries a comment in the revision. The run-time partitions of a partitioned
table are never offered for dropping.

The comparator is registered in Alembic's global comparator registry when this module is
imported (the template's ``env.py`` imports it), and is also published as the Alembic plugin
``sa_inbox.autogenerate`` (entry point ``alembic.plugins``, see :mod:`sa_inbox.alembic_plugin`).
"""

from __future__ import annotations

import textwrap
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import comparators, renderers
from alembic.autogenerate.api import AutogenContext
from alembic.operations import ops
from alembic.util import DispatchPriority, PriorityDispatchResult

from ..exc import InvalidArgument
from .operations import (
    CREATE_OPERATIONS,
    PARTITIONED_PROCESSED_MESSAGES,
    CreateInboxTableOp,
    DropInboxTableOp,
)
from .pairing import resolve_drops
from .received_at import fractional_received_at
from .refusal import RefuseInboxTableDropOp
from .rename import RenameInboxTableOp
from .tables import build_table, marker, matches_factory

__all__ = [
    "IMPORT_LINE",
    "dropped_inbox_operation",
    "inbox_operation_for",
    "render_inbox_op",
    "render_refusal",
    "render_rename",
    "rewrite_inbox_tables",
]

#: The import a revision using the sa-inbox operations needs (it registers them).
IMPORT_LINE = "import sa_inbox.alembic"


def inbox_operation_for(
    operation: ops.CreateTableOp, table: sa.Table | None, dialect: sa.Dialect
) -> CreateInboxTableOp | None:
    """The sa-inbox operation that replaces ``operation``, or ``None`` to keep it.

    :param operation: Alembic's op for a table the database lacks.
    :param table: the MetaData table it was made from.
    :param dialect: the dialect of the migration, for the DDL comparison.
    """
    found = marker(operation.info or {})
    if found is None or table is None:
        return None
    kind, options = found
    if not matches_factory(table, kind, options, dialect):
        return None
    return CREATE_OPERATIONS[kind.name](table.name, schema=table.schema, **options)


def _lookup_table(autogen_context: AutogenContext, name: str, schema: str | None) -> sa.Table:
    key = name if schema is None else f"{schema}.{name}"
    return autogen_context.table_key_to_table[key]


def rewrite_inbox_tables(
    autogen_context: AutogenContext, upgrade_ops: ops.UpgradeOps, schemas: Any
) -> PriorityDispatchResult:
    """The ``"schema"`` comparator: sa-inbox ops in place of ``create_table`` / ``drop_table``.

    A new marked table becomes ``create_<kind>``, its ``create_index`` ops dropped; a
    removed table recognised by :func:`dropped_inbox_operation` becomes ``drop_<kind>``,
    its ``drop_index`` ops dropped (so the downgrade re-creates it with the sa-inbox op).
    Then :func:`~sa_inbox.alembic.pairing.resolve_drops` turns a drop + create into a
    rename, or refuses the drop, and an existing inbox table whose ``received_at`` has
    whole seconds gets its ``alter_column``
    (:func:`~sa_inbox.alembic.received_at.fractional_received_at`). Idempotent: run twice
    (global hook and plugin both enabled), it changes nothing more.
    """
    dialect = autogen_context.dialect
    assert dialect is not None
    dropped_indexes = _dropped_indexes(upgrade_ops)
    covered: dict[tuple[str | None, str], set[str]] = {}
    rewritten: list[ops.MigrateOperation] = []
    for operation in upgrade_ops.ops:
        key = _table_key(operation)
        replacement: CreateInboxTableOp | DropInboxTableOp | None = None
        if isinstance(operation, ops.CreateTableOp):
            table = _lookup_table(autogen_context, operation.table_name, operation.schema)
            replacement = inbox_operation_for(operation, table, dialect)
        elif isinstance(operation, ops.DropTableOp) and key is not None:
            replacement = dropped_inbox_operation(operation, dropped_indexes.get(key), dialect)
        if replacement is not None and key is not None:
            rewritten.append(replacement)
            covered[key] = {str(index.name) for index in replacement.to_table().indexes}
            covered[key] |= _unique_names(replacement.to_table())
            continue
        rewritten.append(operation)
    partitions = _partitions(autogen_context)
    upgrade_ops.ops[:] = resolve_drops(
        [
            op
            for op in rewritten
            if not _drop_covered(op, covered) and not _is_partition(op, partitions)
        ]
    )
    upgrade_ops.ops.extend(fractional_received_at(autogen_context, upgrade_ops))
    return PriorityDispatchResult.CONTINUE


def _table_key(operation: ops.MigrateOperation) -> tuple[str | None, str] | None:
    if isinstance(operation, ops.CreateTableOp | ops.DropTableOp | ops.ModifyTableOps):
        return (operation.schema, operation.table_name)
    return None


def _unique_names(table: sa.Table) -> set[str]:
    return {
        str(constraint.name)
        for constraint in table.constraints
        if isinstance(constraint, sa.UniqueConstraint)
    }


def _dropped_indexes(upgrade_ops: ops.UpgradeOps) -> dict[tuple[str | None, str], set[str]]:
    """Index names of each ``ModifyTableOps`` that only drops indexes (a removed table's)."""
    found: dict[tuple[str | None, str], set[str]] = {}
    for operation in upgrade_ops.ops:
        if isinstance(operation, ops.ModifyTableOps) and all(
            isinstance(op, ops.DropIndexOp) for op in operation.ops
        ):
            names = {str(op.index_name) for op in operation.ops if isinstance(op, ops.DropIndexOp)}
            found[(operation.schema, operation.table_name)] = names
    return found


def dropped_inbox_operation(
    operation: ops.DropTableOp, dropped_indexes: set[str] | None, dialect: sa.Dialect
) -> DropInboxTableOp | None:
    """The sa-inbox drop operation for a table the MetaData no longer has, or ``None``.

    A reflected table is recognised as a kind's table when its columns are exactly the
    factory's (same names, same order) and the indexes Alembic drops with it are exactly
    the factory's (MySQL lists a unique constraint among them; the consumers table has
    none). The length option is read from the reflected key column (``message_id``; the
    consumers table's ``consumer_name``). Anything else keeps Alembic's ``drop_table``.
    """
    table = operation.to_table()
    dropped = dropped_indexes or set()
    for create_class in CREATE_OPERATIONS.values():
        kind = create_class.kind
        if kind.dialects is not None and dialect.name not in kind.dialects:
            continue
        if kind.length_column not in table.c:
            continue
        length = getattr(table.c[kind.length_column].type, "length", None)
        try:
            fresh = build_table(kind, table.name, table.schema, {kind.length_option: length})
        except InvalidArgument:
            continue
        indexes = {str(index.name) for index in fresh.indexes}
        same_columns = [c.name for c in table.columns] == [c.name for c in fresh.columns]
        if same_columns and indexes <= dropped <= indexes | _unique_names(fresh):
            return create_class.drop_class(table.name, schema=table.schema, **_options(fresh))
    return None


def _options(table: sa.Table) -> dict[str, Any]:
    found = marker(table.info)
    assert found is not None, "factories mark their tables"
    return found[1]


#: The partitions of a partitioned table (PostgreSQL catalog, manual "pg_inherits").
PARTITIONS_SQL = sa.text(
    "SELECT c.relname FROM pg_catalog.pg_inherits i "
    "JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = to_regclass(:parent)"
)


def _partitions(autogen_context: AutogenContext) -> set[tuple[str | None, str]]:
    """``(schema, name)`` of the partitions of the marked partitioned tables.

    Partitions are made at run time (:func:`sa_inbox.retention.partitions.ensure_partitions`), not
    by migrations, so autogenerate must not offer to drop them.
    """
    conn = autogen_context.connection
    if conn is None or conn.dialect.name != "postgresql":
        return set()
    found: set[tuple[str | None, str]] = set()
    for table in autogen_context.sorted_tables:
        mark = marker(table.info)
        if mark is None or mark[0] is not PARTITIONED_PROCESSED_MESSAGES:
            continue
        parent = conn.dialect.identifier_preparer.format_table(table)
        for (name,) in conn.execute(PARTITIONS_SQL, {"parent": parent}):
            found.add((table.schema, name))
    return found


def _is_partition(operation: ops.MigrateOperation, partitions: set[tuple[str | None, str]]) -> bool:
    if isinstance(operation, ops.DropTableOp | ops.ModifyTableOps):
        return (operation.schema, operation.table_name) in partitions
    return False


def _drop_covered(
    operation: ops.MigrateOperation, covered: dict[tuple[str | None, str], set[str]]
) -> bool:
    """Remove the index ops the sa-inbox op already does (create or drop); True if now empty."""
    if not isinstance(operation, ops.ModifyTableOps):
        return False
    indexes = covered.get((operation.schema, operation.table_name))
    if indexes is None:
        return False
    operation.ops[:] = [
        op
        for op in operation.ops
        if not (
            isinstance(op, ops.CreateIndexOp | ops.DropIndexOp) and str(op.index_name) in indexes
        )
    ]
    return operation.is_empty()


#: Width of the comment lines written into a revision.
COMMENT_WIDTH = 88


def _comments(lines: list[str]) -> list[str]:
    """``lines`` as ``# sa-inbox: ...`` comment lines, wrapped; none for no lines.

    No line ends with ``:``, which Mako's printer would take for a block opener.
    """
    wrapped = textwrap.wrap(
        "sa-inbox: " + " ".join(lines), COMMENT_WIDTH - 2, break_on_hyphens=False
    )
    return [f"# {line}".rstrip(":") for line in wrapped] if lines else []


def _render_call(
    autogen_context: AutogenContext, name: str, arguments: list[str], options: dict[str, Any]
) -> str:
    """``op.<name>(arguments..., key=value...)``; adds the sa-inbox import to the revision."""
    autogen_context.imports.add(IMPORT_LINE)
    arguments = arguments + [f"{key}={value!r}" for key, value in sorted(options.items())]
    prefix = autogen_context.opts.get("alembic_module_prefix") or "op."
    return f"{prefix}{name}({', '.join(arguments)})"


def _schema(schema: str | None) -> list[str]:
    return [] if schema is None else [f"schema={schema!r}"]


def render_inbox_op(
    autogen_context: AutogenContext, operation: CreateInboxTableOp | DropInboxTableOp
) -> list[str]:
    """``op.create_inbox_table('name', schema='s', message_id_length=255)``, after any notes."""
    name = (
        operation.kind.create_op
        if isinstance(operation, CreateInboxTableOp)
        else operation.kind.drop_op
    )
    arguments = [repr(operation.table_name), *_schema(operation.schema)]
    call = _render_call(autogen_context, name, arguments, operation.options)
    return [*_comments(operation.notes), call]


def render_rename(autogen_context: AutogenContext, operation: RenameInboxTableOp) -> list[str]:
    """A comment saying what was renamed and why, then ``op.rename_inbox_table(old, new)``."""
    old, new = operation.old_table_name, operation.new_table_name
    said = (
        f"{old} renamed to {new}, in place of a drop + create, which would lose {operation.rows}."
    )
    arguments = [repr(old), repr(new), *_schema(operation.schema)]
    call = _render_call(autogen_context, operation.op_name, arguments, operation.options)
    return [*_comments([said, *operation.notes]), call]


def render_refusal(autogen_context: AutogenContext, operation: RefuseInboxTableDropOp) -> list[str]:
    """The reason as a comment, then ``op.refuse_inbox_table_drop(name, reason=...)``.

    The reason is written as adjacent string literals, one per line, so no line of the
    revision is much longer than the comment's.
    """
    pieces = textwrap.wrap(operation.reason, COMMENT_WIDTH - 12, break_on_hyphens=False)
    pieces = [f"{piece} " for piece in pieces[:-1]] + pieces[-1:]
    reason = "\n".join(f"        {piece!r}" for piece in pieces)
    arguments = [repr(operation.table_name), *_schema(operation.schema)]
    call = _render_call(autogen_context, "refuse_inbox_table_drop", arguments, {})
    return [*_comments([operation.reason]), f"{call[:-1]},\n    reason=(\n{reason}\n    ),\n)"]


# Global registries: every autogenerate run in this process uses them once this module is
# imported (Alembic copies the global comparators into each run's own dispatcher).
comparators.dispatch_for("schema", priority=DispatchPriority.LAST)(rewrite_inbox_tables)
renderers.dispatch_for(CreateInboxTableOp)(render_inbox_op)
renderers.dispatch_for(DropInboxTableOp)(render_inbox_op)
renderers.dispatch_for(RenameInboxTableOp)(render_rename)
renderers.dispatch_for(RefuseInboxTableDropOp)(render_refusal)
