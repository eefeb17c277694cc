"""Autogenerate: an inbox table whose ``received_at`` has whole seconds migrates to microseconds.

sa-inbox 0.1 created the processed-messages table's ``received_at`` on MySQL/MariaDB as
``DATETIME DEFAULT CURRENT_TIMESTAMP`` (whole seconds); the models now say ``DATETIME(6)
DEFAULT CURRENT_TIMESTAMP(6)`` (:data:`sa_inbox.schema.RECEIVED_AT`). Alembic's type
comparison does not compare a ``DATETIME``'s fractional precision, so autogenerate and
``alembic check`` would not see the difference: :func:`fractional_received_at` finds such an
existing table and renders Alembic's own ``op.alter_column`` for it (``MODIFY`` the column,
default included: MySQL manual, "ALTER TABLE Statement"; a type change rebuilds the table).
Its downgrade restores the reflected type and default.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.autogenerate.api import AutogenContext
from alembic.operations import ops
from sqlalchemy.dialects import mysql

from .operations import PARTITIONED_PROCESSED_MESSAGES, PROCESSED_MESSAGES
from .tables import marker

__all__ = ["fractional_received_at"]

#: The backends whose ``DATETIME`` needs its precision named.
DIALECTS = ("mysql", "mariadb")
#: What ``received_at`` becomes there: :data:`sa_inbox.schema.RECEIVED_AT`'s variant.
FRACTIONAL = mysql.DATETIME(fsp=6)
FRACTIONAL_DEFAULT = "CURRENT_TIMESTAMP(6)"


def fractional_received_at(
    autogen_context: AutogenContext, upgrade_ops: ops.UpgradeOps
) -> list[ops.ModifyTableOps]:
    """The ``alter_column`` of each existing processed-messages table of the MetaData whose
    ``received_at`` has whole seconds on MySQL/MariaDB; none elsewhere, none for a table
    the database lacks, none already in ``upgrade_ops`` (idempotent).

    :param autogen_context: the autogenerate run (its connection and MetaData).
    :param upgrade_ops: the operations found so far.
    """
    conn = autogen_context.connection
    if conn is None or conn.dialect.name not in DIALECTS:
        return []
    inspector = sa.inspect(conn)
    found: list[ops.ModifyTableOps] = []
    for table in autogen_context.sorted_tables:
        mark = marker(table.info)
        if mark is None or mark[0] not in (PROCESSED_MESSAGES, PARTITIONED_PROCESSED_MESSAGES):
            continue
        if _planned(upgrade_ops, table) or not inspector.has_table(table.name, table.schema):
            continue
        column = _reflected(inspector, table)
        if column is None or getattr(column["type"], "fsp", None):
            continue
        alter = ops.AlterColumnOp(
            table.name,
            "received_at",
            schema=table.schema,
            existing_type=column["type"],
            existing_nullable=column["nullable"],
            existing_server_default=_default(column),
            modify_type=FRACTIONAL,
            modify_server_default=sa.schema.DefaultClause(sa.text(FRACTIONAL_DEFAULT)),
        )
        found.append(ops.ModifyTableOps(table.name, [alter], schema=table.schema))
    return found


def _reflected(inspector: Any, table: sa.Table) -> dict[str, Any] | None:
    for column in inspector.get_columns(table.name, schema=table.schema):
        if column["name"] == "received_at":
            return dict(column)
    return None


def _default(column: dict[str, Any]) -> sa.schema.DefaultClause | None:
    """The reflected default as a clause (rendered ``sa.text(...)`` in the revision)."""
    default = column.get("default")
    return None if default is None else sa.schema.DefaultClause(sa.text(str(default)))


def _planned(upgrade_ops: ops.UpgradeOps, table: sa.Table) -> bool:
    """Whether ``upgrade_ops`` alters ``table``'s ``received_at`` already."""
    return any(
        isinstance(operation, ops.ModifyTableOps)
        and (operation.schema, operation.table_name) == (table.schema, table.name)
        and any(
            isinstance(op, ops.AlterColumnOp) and op.column_name == "received_at"
            for op in operation.ops
        )
        for operation in upgrade_ops.ops
    )
